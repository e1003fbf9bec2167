//! Reading one HTTP/1.1 request, for the tests' stand-in servers (providers, peers'
//! endpoints, benches): the request line, the headers and the body, by
//! `content-length` or `transfer-encoding: chunked`.

use serde_json::Value;
use std::io::BufRead;

/// One request as a stand-in server saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    pub method: String,
    pub path: String,
    /// Names lowercased, values trimmed, in the order sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpRequest {
    /// The first header named `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// Reads the next request from `r`; `None` when the peer closed the connection or the
/// request was cut short.
pub fn read_request(r: &mut impl BufRead) -> Option<HttpRequest> {
    let mut first = String::new();
    if r.read_line(&mut first).ok()? == 0 {
        return None;
    }
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let mut req = HttpRequest {
        method,
        path,
        headers,
        body: Vec::new(),
    };
    let chunked = req
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        loop {
            let mut size = String::new();
            if r.read_line(&mut size).ok()? == 0 {
                return None;
            }
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            req.body.extend_from_slice(&chunk[..n]);
        }
    } else {
        let len = req
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        req.body.resize(len, 0);
        r.read_exact(&mut req.body).ok()?;
    }
    Some(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_length_and_chunked_bodies_one_request_after_another() {
        let wire = b"POST /v1/chat HTTP/1.1\r\nContent-Length: 7\r\nX-A: b \r\n\r\n{\"a\":1}\
GET /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n\
POST /cut HTTP/1.1\r\ncontent-length: 9\r\n\r\nshort";
        let mut r = std::io::BufReader::new(&wire[..]);
        let a = read_request(&mut r).unwrap();
        assert_eq!((a.method.as_str(), a.path.as_str()), ("POST", "/v1/chat"));
        assert_eq!(a.header("x-a"), Some("b"));
        assert_eq!(a.json(), serde_json::json!({"a": 1}));
        let b = read_request(&mut r).unwrap();
        assert_eq!((b.method.as_str(), b.path.as_str()), ("GET", "/p"));
        assert_eq!(b.body, b"abcde");
        assert_eq!(read_request(&mut r), None, "a body cut short is no request");
        assert_eq!(read_request(&mut r), None);
    }
}
