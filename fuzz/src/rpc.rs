//! `rpc_call`: bytes as one JSON-RPC message read by the daemon's fast call parser
//! (`agentd::server::parse_call`), checked against jsonrpsee's `Request`: both accept
//! or both refuse, and what both accept has the same id, method and raw params.

use jsonrpsee::types::Request;

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let theirs = serde_json::from_str::<Request>(text);
    let ours = agentd::server::parse_call(text);
    match (theirs, ours) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.id, b.id, "ids differ for {text:?}");
            assert_eq!(a.method, b.method, "methods differ for {text:?}");
            assert_eq!(
                a.params.as_ref().map(|p| p.get()),
                b.params.as_ref().map(|p| p.get()),
                "params differ for {text:?}"
            );
        }
        (Err(_), Err(_)) => {}
        (a, b) => panic!(
            "jsonrpsee {} but parse_call {} {text:?}",
            if a.is_ok() { "accepts" } else { "refuses" },
            if b.is_ok() { "accepts" } else { "refuses" },
        ),
    }
}
