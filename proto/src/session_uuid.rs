//! A session id as a UUID, and back (docs/codex-app-server.md#session-identity).
//!
//! Clients that only take UUIDs as thread ids (Codex's app-server protocol) see each
//! session as one stable UUID, whichever front door opens it. A session's own UUID comes
//! from its id by three rules, tried in order:
//!
//! 1. an id that already is a UUID in canonical form (lowercase, hyphenated) is its own
//!    UUID (an id a client chose as a UUID);
//! 2. an id in agentd's own format, `YYYYMMDDTHHMMSS-xxxxxx` (see
//!    [`crate::session_id::generate`]), is encoded reversibly as a version-7 UUID: the
//!    creation second as its Unix milliseconds, a fixed marker, then the 24 bits of the
//!    suffix. It sorts by creation time, like the UUIDv7 ids Codex itself makes;
//! 3. any other id (one a client chose) gets the name-based (version 5, SHA-1) UUID of
//!    the id in agentd's namespace: a function of the recorded id, the same after a
//!    restart, a store copy or on another machine.
//!
//! A session imported from another agent that named it by a UUID (a Codex thread, a
//! Claude Code session) answers to that UUID too: the source's id is recorded in the
//! Log (`session_started.data.imported_from.session_id`) and the daemon's index maps it
//! back (`agentd/resolve`, docs/protocol.md#session-uuids). That mapping needs the
//! index, so it is the daemon's, not this module's.
//!
//! Pure: no I/O, so the daemon and every client agree on the bytes.

use sha1::{Digest, Sha1};

/// The namespace of rule 3's name-based UUIDs.
const NAMESPACE: [u8; 16] = [
    0x6a, 0x0e, 0x5c, 0x8b, 0x2f, 0x1d, 0x4e, 0x7a, 0x9c, 0x33, 0x51, 0x0d, 0xa4, 0xe2, 0x7f, 0x16,
];

/// Bytes 8..13 of an encoded agentd id (rule 2): the RFC 9562 variant bits, then "ntd\0".
const MARKER: [u8; 5] = [0x8a, b'n', b't', b'd', 0];

/// What a UUID names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// The session id, decoded (rule 2).
    Session(String),
    /// A UUID (canonical form) that is either a session's own id (rule 1) or the alias of
    /// one (rule 3): look for the session whose [`to_uuid`] equals it.
    Lookup(String),
}

/// The UUID of a session id (canonical lowercase hyphenated form).
pub fn to_uuid(id: &str) -> String {
    if parse_hex(id).is_some_and(|b| format_uuid(&b) == id) {
        return id.to_string();
    }
    if let Some(b) = encode_native(id) {
        return format_uuid(&b);
    }
    let mut h = Sha1::new();
    h.update(NAMESPACE);
    h.update(id.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    format_uuid(&b)
}

/// What a client's UUID names. Accepts an optional `urn:uuid:` prefix and either case;
/// `None` when it is not a UUID at all.
pub fn resolve(uuid: &str) -> Option<Resolved> {
    let s = uuid.strip_prefix("urn:uuid:").unwrap_or(uuid);
    let b = parse_hex(s)?;
    if let Some(id) = decode_native(&b) {
        return Some(Resolved::Session(id));
    }
    Some(Resolved::Lookup(format_uuid(&b)))
}

/// The canonical form (lowercase, hyphenated, no `urn:uuid:`) of a UUID written in any
/// form [`resolve`] accepts; `None` when `s` is not a UUID.
pub fn canonical(s: &str) -> Option<String> {
    parse_hex(s.strip_prefix("urn:uuid:").unwrap_or(s)).map(|b| format_uuid(&b))
}

/// Whether session `id` is the one `uuid` (canonical form, from [`Resolved::Lookup`]) names.
pub fn matches(id: &str, uuid: &str) -> bool {
    to_uuid(id) == uuid
}

const STAMP: &[time::format_description::BorrowedFormatItem<'static>] =
    time::macros::format_description!("[year][month][day]T[hour][minute][second]");

/// Rule 2's encoding, when `id` is exactly agentd's format.
fn encode_native(id: &str) -> Option<[u8; 16]> {
    let (stamp, suffix) = id.split_once('-')?;
    if stamp.len() != 15
        || suffix.len() != 6
        || !suffix
            .bytes()
            .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    let t = time::PrimitiveDateTime::parse(stamp, STAMP).ok()?;
    // Only ids that format back to themselves, so decoding gives the same bytes.
    if t.format(STAMP).ok()? != stamp {
        return None;
    }
    let secs = t.assume_utc().unix_timestamp();
    let ms = u64::try_from(secs).ok()?.checked_mul(1000)?;
    if ms >= 1 << 48 {
        return None;
    }
    let r = u32::from_str_radix(suffix, 16).ok()?;
    let mut b = [0u8; 16];
    b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    b[6] = 0x70;
    b[7] = 0;
    b[8..13].copy_from_slice(&MARKER);
    b[13..].copy_from_slice(&r.to_be_bytes()[1..]);
    Some(b)
}

fn decode_native(b: &[u8; 16]) -> Option<String> {
    if b[6] != 0x70 || b[7] != 0 || b[8..13] != MARKER {
        return None;
    }
    let mut ms = [0u8; 8];
    ms[2..].copy_from_slice(&b[..6]);
    let ms = u64::from_be_bytes(ms);
    if ms % 1000 != 0 {
        return None;
    }
    let t = time::OffsetDateTime::from_unix_timestamp(i64::try_from(ms / 1000).ok()?).ok()?;
    let stamp = t.format(STAMP).ok()?;
    let id = format!("{stamp}-{:02x}{:02x}{:02x}", b[13], b[14], b[15]);
    // A stamp past year 9999 formats to more digits: not an id agentd makes.
    (encode_native(&id).as_ref() == Some(b)).then_some(id)
}

fn parse_hex(s: &str) -> Option<[u8; 16]> {
    let bytes = s.as_bytes();
    if bytes.len() != 36 || [8, 13, 18, 23].iter().any(|&i| bytes[i] != b'-') {
        return None;
    }
    let mut out = [0u8; 16];
    let mut n = 0;
    let mut hi: Option<u8> = None;
    for (i, &c) in bytes.iter().enumerate() {
        if [8, 13, 18, 23].contains(&i) {
            continue;
        }
        let v = (c as char).to_digit(16)? as u8;
        match hi.take() {
            None => hi = Some(v),
            Some(h) => {
                out[n] = (h << 4) | v;
                n += 1;
            }
        }
    }
    Some(out)
}

/// `bytes` as a version 4 (random layout) UUID: the version and variant bits set, the
/// rest kept, lowercase.
pub fn uuid_v4(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    format_uuid(&bytes)
}

fn format_uuid(b: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, x) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{x:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_v4_sets_the_version_and_variant_and_keeps_the_rest() {
        assert_eq!(uuid_v4([0xff; 16]), "ffffffff-ffff-4fff-bfff-ffffffffffff");
        assert_eq!(uuid_v4([0; 16]), "00000000-0000-4000-8000-000000000000");
    }

    #[test]
    fn agentd_ids_round_trip_as_version_7_uuids_in_creation_order() {
        let id = "20261127T044348-00d7f9";
        let u = to_uuid(id);
        assert_eq!(u, "01a21b51-13a0-7000-8a6e-74640000d7f9");
        assert_eq!(resolve(&u), Some(Resolved::Session(id.into())));
        assert_eq!(
            resolve(&format!("urn:uuid:{}", u.to_uppercase())),
            Some(Resolved::Session(id.into()))
        );
        let later = to_uuid("20261127T044349-000000");
        assert!(later > u, "a later id sorts after");
        for _ in 0..50 {
            let g = crate::session_id::generate();
            assert_eq!(resolve(&to_uuid(&g)), Some(Resolved::Session(g)));
        }
    }

    #[test]
    fn uuid_ids_are_their_own_uuid_and_other_ids_get_a_stable_alias() {
        let own = "01a2115b-946a-70e3-ad4d-346112905e8a";
        assert_eq!(to_uuid(own), own);
        assert_eq!(resolve(own), Some(Resolved::Lookup(own.into())));
        for id in [
            "imported-claude-session",
            "20261127T044348-00D7F9", // upper-case hex: not agentd's format
            "20261331T000000-000000", // no 31st of a 13th month
            "01A2115B-946A-70E3-AD4D-346112905E8A",
        ] {
            let a = to_uuid(id);
            assert_eq!(a, to_uuid(id), "stable");
            assert_eq!(&a[14..15], "5", "{id}: a name-based alias");
            assert!(matches(id, &a));
            assert_eq!(resolve(&a), Some(Resolved::Lookup(a.clone())));
        }
        assert_ne!(to_uuid("a"), to_uuid("b"));
        assert!(!matches("a", &to_uuid("b")));
        assert_eq!(
            canonical("urn:uuid:01A2115B-946A-70E3-AD4D-346112905E8A").as_deref(),
            Some(own)
        );
        assert_eq!(canonical("thread-1"), None);
        for bad in [
            "",
            "not-a-uuid",
            "019cc37e-c960-7000-8a6e-74640000d7f",
            "thread-1",
        ] {
            assert_eq!(resolve(bad), None, "{bad:?}");
        }
    }
}
