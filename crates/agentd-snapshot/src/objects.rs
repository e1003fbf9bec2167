//! Git objects written in-process into a shadow repository's object store: a blob or
//! tree is hashed (SHA-1 over `"<kind> <len>\0" + body`, git's object id) and, when the
//! store does not hold it yet, written as a zlib-compressed loose object through a
//! temporary file and a rename, so a crash never leaves half an object under its name.
//!
//! This is what lets a snapshot cost no process spawn: the `git` command reads these
//! objects like any it wrote itself (diff, restore and fork use it).

use flate2::{read::ZlibDecoder, write::ZlibEncoder, Compression};
use sha1::{Digest, Sha1};
use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// A git object id (SHA-1).
pub type Oid = [u8; 20];

/// Git's file modes as they appear in trees.
pub const MODE_FILE: u32 = 0o100644;
pub const MODE_EXEC: u32 = 0o100755;
pub const MODE_LINK: u32 = 0o120000;
pub const MODE_TREE: u32 = 0o40000;

pub fn object_id(kind: &str, body: &[u8]) -> Oid {
    let mut h = Sha1::new();
    h.update(format!("{kind} {}\0", body.len()).as_bytes());
    h.update(body);
    h.finalize().into()
}

/// The loose object store of one repository, remembering what it already holds.
#[derive(Debug, Default)]
pub struct Store {
    objects: PathBuf,
    known: HashSet<Oid>,
}

impl Store {
    pub fn new(objects: PathBuf) -> Store {
        Store {
            objects,
            known: HashSet::new(),
        }
    }

    /// The `objects` directory.
    pub fn dir(&self) -> &Path {
        &self.objects
    }

    fn path(&self, oid: &Oid) -> PathBuf {
        let h = hex::encode(oid);
        self.objects.join(&h[..2]).join(&h[2..])
    }

    /// Whether the store holds `oid` as a loose object.
    pub fn has(&self, oid: &Oid) -> bool {
        self.known.contains(oid) || self.path(oid).is_file()
    }

    /// Writes an object unless the store holds it; its id either way.
    pub fn write(&mut self, kind: &str, body: &[u8]) -> io::Result<Oid> {
        let oid = object_id(kind, body);
        if self.known.contains(&oid) {
            return Ok(oid);
        }
        let path = self.path(&oid);
        if !path.is_file() {
            let dir = path.parent().unwrap_or(&self.objects);
            std::fs::create_dir_all(dir)?;
            let mut enc =
                ZlibEncoder::new(Vec::with_capacity(body.len() / 2 + 64), Compression::fast());
            enc.write_all(format!("{kind} {}\0", body.len()).as_bytes())?;
            enc.write_all(body)?;
            let data = enc.finish()?;
            let tmp = dir.join(format!("tmp_obj_{:08x}", rand::random::<u32>()));
            let res = std::fs::write(&tmp, data).and_then(|_| std::fs::rename(&tmp, &path));
            if res.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            res?;
        }
        self.known.insert(oid);
        Ok(oid)
    }
}

/// Reads the header of a loose object: its kind and length. `Ok(None)` when the store
/// has no such file; an error when the file is there but is not a readable object.
pub fn read_header(objects: &Path, oid: &Oid) -> io::Result<Option<(String, u64)>> {
    let h = hex::encode(oid);
    let file = match std::fs::File::open(objects.join(&h[..2]).join(&h[2..])) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut head = Vec::with_capacity(32);
    let mut dec = ZlibDecoder::new(file).take(32);
    dec.read_to_end(&mut head)?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("object {h} is corrupt"));
    let nul = head.iter().position(|b| *b == 0).ok_or_else(bad)?;
    let text = std::str::from_utf8(&head[..nul]).map_err(|_| bad())?;
    let (kind, len) = text.split_once(' ').ok_or_else(bad)?;
    let len = len.parse::<u64>().map_err(|_| bad())?;
    Ok(Some((kind.to_string(), len)))
}

/// Parses a 40-digit hex object id.
pub fn parse_oid(s: &str) -> Option<Oid> {
    let v = hex::decode(s).ok()?;
    v.try_into().ok()
}

/// Appends one tree entry (`"<mode> <name>\0<id>"`).
pub fn push_entry(body: &mut Vec<u8>, mode: u32, name: &[u8], oid: &Oid) {
    body.extend_from_slice(format!("{mode:o} ").as_bytes());
    body.extend_from_slice(name);
    body.push(0);
    body.extend_from_slice(oid);
}
