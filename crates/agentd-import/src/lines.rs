//! A line reader for source files that keeps memory bounded by the longest *kept* line.
//!
//! `BufRead::read_until` would buffer a pathological 2 GB line whole; here a line longer
//! than the cap is read through and reported as oversized instead, so one bad line costs
//! a skip, not the import. Byte offsets are tracked so a second pass can seek back to an
//! entry (pi tree files).

use std::io::{self, BufRead, Seek, SeekFrom};

/// Lines longer than this are skipped, never buffered whole.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// `seek_to` reads forward through at most this many bytes rather than seeking.
const READ_THROUGH_MAX: u64 = 4 * 1024 * 1024;

/// One physical line of the source.
pub struct Line<'a> {
    /// 1-based line number.
    pub no: u64,
    /// Byte offset of the line's first byte.
    pub offset: u64,
    /// The line without its `\n` (and without a trailing `\r`); empty when oversized.
    pub bytes: &'a [u8],
    /// False for a last line that ends without `\n` (possibly torn).
    pub terminated: bool,
    /// `Some(total length)` when the line was longer than the cap and was not kept.
    pub oversized: Option<u64>,
}

pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    next_no: u64,
    offset: u64,
    max: usize,
}

impl<R: BufRead> LineReader<R> {
    pub fn new(inner: R) -> Self {
        Self::with_max(inner, MAX_LINE_BYTES)
    }

    pub fn with_max(inner: R, max: usize) -> Self {
        LineReader {
            inner,
            buf: Vec::new(),
            next_no: 1,
            offset: 0,
            max,
        }
    }

    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        self.buf.clear();
        let start = self.offset;
        let mut total: u64 = 0;
        let mut terminated = false;
        loop {
            let avail = match self.inner.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                break;
            }
            let (chunk_len, consumed, found) = match memchr::memchr(b'\n', avail) {
                Some(i) => (i, i + 1, true),
                None => (avail.len(), avail.len(), false),
            };
            let room = self.max.saturating_sub(self.buf.len());
            if room > 0 {
                self.buf
                    .extend_from_slice(&avail[..chunk_len.min(room.saturating_add(1))]);
            }
            total += chunk_len as u64;
            self.inner.consume(consumed);
            self.offset += consumed as u64;
            if found {
                terminated = true;
                break;
            }
        }
        if total == 0 && !terminated {
            return Ok(None);
        }
        let no = self.next_no;
        self.next_no += 1;
        let oversized = (total > self.max as u64).then_some(total);
        let mut bytes: &[u8] = if oversized.is_some() { &[] } else { &self.buf };
        if let [rest @ .., b'\r'] = bytes {
            bytes = rest;
        }
        Ok(Some(Line {
            no,
            offset: start,
            bytes,
            terminated,
            oversized,
        }))
    }
}

impl LineReader<io::BufReader<std::fs::File>> {
    /// A source file, read in 1 MiB chunks.
    pub fn file(f: std::fs::File) -> Self {
        LineReader::new(io::BufReader::with_capacity(1 << 20, f))
    }
}

impl<R: BufRead + Seek> LineReader<R> {
    /// Positions the reader so that the next line read starts at `offset` and is numbered
    /// `no`. Seeks only when needed, so walking lines in file order costs no seeks.
    ///
    /// A short forward move reads through instead: seeking a `BufReader` drops its
    /// buffer, and a second pass that visits every few lines would otherwise refill a
    /// whole buffer per line.
    pub fn seek_to(&mut self, offset: u64, no: u64) -> io::Result<()> {
        if offset > self.offset && offset - self.offset <= READ_THROUGH_MAX {
            let mut left = offset - self.offset;
            while left > 0 {
                let avail = match self.inner.fill_buf() {
                    Ok(a) => a.len() as u64,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                if avail == 0 {
                    break;
                }
                let n = avail.min(left);
                self.inner.consume(n as usize);
                left -= n;
            }
            self.offset = offset - left;
        }
        if offset != self.offset {
            self.inner.seek(SeekFrom::Start(offset))?;
            self.offset = offset;
        }
        self.next_no = no;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// (no, offset, bytes, terminated, oversized)
    type Row = (u64, u64, Vec<u8>, bool, Option<u64>);

    fn collect(input: &[u8], max: usize) -> Vec<Row> {
        let mut r = LineReader::with_max(io::BufReader::with_capacity(3, input), max);
        let mut out = Vec::new();
        while let Some(l) = r.next_line().unwrap() {
            out.push((l.no, l.offset, l.bytes.to_vec(), l.terminated, l.oversized));
        }
        out
    }

    #[test]
    fn splits_lines_with_offsets_and_flags_a_torn_tail() {
        let got = collect(b"ab\r\n\ncdef\nxyz", 100);
        assert_eq!(
            got,
            vec![
                (1, 0, b"ab".to_vec(), true, None),
                (2, 4, b"".to_vec(), true, None),
                (3, 5, b"cdef".to_vec(), true, None),
                (4, 10, b"xyz".to_vec(), false, None),
            ]
        );
        assert!(collect(b"", 10).is_empty());
    }

    #[test]
    fn oversized_lines_are_read_through_not_kept() {
        let got = collect(b"0123456789\nok\n", 4);
        assert_eq!(got[0].4, Some(10));
        assert!(got[0].2.is_empty());
        assert_eq!(got[1], (2, 11, b"ok".to_vec(), true, None));
        // Exactly at the cap is kept.
        assert_eq!(collect(b"0123\n", 4)[0].2, b"0123".to_vec());
    }

    #[test]
    fn seek_to_reads_forward_through_the_buffer() {
        let mut r = LineReader::new(io::BufReader::with_capacity(
            4,
            Cursor::new(b"a\nbb\nccc\ndddd\n".to_vec()),
        ));
        r.seek_to(5, 3).unwrap();
        let l = r.next_line().unwrap().unwrap();
        assert_eq!((l.no, l.offset, l.bytes), (3, 5, &b"ccc"[..]));
        r.seek_to(9, 4).unwrap();
        let l = r.next_line().unwrap().unwrap();
        assert_eq!((l.no, l.offset, l.bytes), (4, 9, &b"dddd"[..]));
        // Backwards still seeks.
        r.seek_to(2, 2).unwrap();
        assert_eq!(r.next_line().unwrap().unwrap().bytes, b"bb");
    }

    #[test]
    fn seek_to_rereads_a_line() {
        let mut r = LineReader::new(Cursor::new(b"a\nbb\nccc\n".to_vec()));
        while r.next_line().unwrap().is_some() {}
        r.seek_to(2, 2).unwrap();
        let l = r.next_line().unwrap().unwrap();
        assert_eq!((l.no, l.bytes), (2, &b"bb"[..]));
    }
}
