//! Tools a turn can call, confined to the session workspace (DESIGN §10).
