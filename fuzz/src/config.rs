//! `config`: bytes as `config.toml`. Parsing (the daemon's whole-file validation,
//! errors explained with key, line and nearest key) gives a config or an error, never a
//! panic, and a parsed config answers its derived settings.

use agentd::config::Config;

pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(c) = Config::parse(&text) {
        let _ = c.batch_window();
        let _ = c.durability.as_str();
        let _ = c.providers_config().all();
    }
}
