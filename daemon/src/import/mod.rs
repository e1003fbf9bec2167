//! Importers of sessions recorded by other agents (pi, Pixir, Codex rollouts).
