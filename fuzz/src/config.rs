//! `config`: bytes as `config.toml`. Parsing gives a config or an error, never a panic,
//! and a parsed config answers its derived settings; the provider table parses the
//! same way.

use agentd::config::Config;

pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(c) = toml::from_str::<Config>(&text) {
        let _ = c.batch_window();
        let _ = c.durability.as_str();
    }
    let _ = agentd::provider::config::ProvidersConfig::from_toml_str(&text);
}
