//! agentd: the daemon that owns durable coding-agent session Logs.
