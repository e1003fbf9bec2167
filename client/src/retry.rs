//! Retrying a prompt across a lost connection or a daemon restart, without ever
//! sending it twice (docs/durability.md).
//!
//! Every prompt gets one `client_request_id` ([`new_request_id`]) before its first
//! attempt; each retry sends the same params with the same id, so the daemon answers
//! the turn it already admitted (and waits for it, resumed after a crash) instead of
//! starting a second one. Only a lost or refused connection (kind
//! `daemon_unavailable`) is retried; every other error is the answer.
//!
//! `agentctl turn` and `run` and the ACP bridge use it; other clients of the library
//! pass their own ids (for example a Codex `clientUserMessageId`).

use agentd_proto::{AgentError, ErrorKind};
use std::future::Future;
use std::time::{Duration, Instant};

/// A fresh `client_request_id`: `agentctl-` and 32 random hex digits (well inside the
/// 128 printable ASCII characters the daemon takes).
pub fn new_request_id() -> String {
    format!(
        "agentctl-{}{}",
        agentd_proto::event::new_event_id(),
        agentd_proto::event::new_event_id()
    )
}

/// Whether `e` is worth a retry with the same `client_request_id`: the connection was
/// lost or refused, or the daemon was stopping.
pub fn retryable(e: &AgentError) -> bool {
    e.kind == ErrorKind::DaemonUnavailable
}

/// How long and how often to retry.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// First wait between attempts; doubled after each, up to `max_delay`.
    pub first_delay: Duration,
    pub max_delay: Duration,
    /// No attempt starts after this much time since the first.
    pub give_up_after: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            first_delay: Duration::from_millis(50),
            max_delay: Duration::from_secs(2),
            give_up_after: Duration::from_secs(120),
        }
    }
}

impl Policy {
    /// The wait before attempt `n` (1 = the first retry).
    pub fn delay(&self, n: u32) -> Duration {
        let shift = n.saturating_sub(1).min(16);
        self.first_delay
            .saturating_mul(1u32 << shift)
            .min(self.max_delay)
    }
}

/// One attempt: its number (0 = the first) and the time since the first began.
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    pub n: u32,
    pub since_first: Duration,
}

/// Runs `op` until it returns something other than a [`retryable`] error, waiting
/// [`Policy::delay`] between attempts; the last error is returned once
/// `give_up_after` has passed. `op` must send the same request each time.
pub async fn with_retry<T, F, Fut>(policy: Policy, mut op: F) -> Result<T, AgentError>
where
    F: FnMut(Attempt) -> Fut,
    Fut: Future<Output = Result<T, AgentError>>,
{
    let first = Instant::now();
    let mut n = 0u32;
    loop {
        let res = op(Attempt {
            n,
            since_first: first.elapsed(),
        })
        .await;
        match res {
            Err(e) if retryable(&e) && first.elapsed() < policy.give_up_after => {
                n += 1;
                tokio::time::sleep(policy.delay(n)).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_valid_and_distinct() {
        let (a, b) = (new_request_id(), new_request_id());
        assert_ne!(a, b);
        assert!(agentd_proto::rpc::validate_client_request_id(&a).is_ok());
        assert_eq!(a.len(), "agentctl-".len() + 32);
    }

    #[test]
    fn delays_double_up_to_the_cap() {
        let p = Policy::default();
        let ms: Vec<u128> = (1..=8).map(|n| p.delay(n).as_millis()).collect();
        assert_eq!(ms, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(p.delay(1000), p.max_delay);
    }

    #[tokio::test]
    async fn only_a_lost_daemon_is_retried() {
        let policy = Policy {
            first_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(1),
            give_up_after: Duration::from_secs(10),
        };
        let mut seen = Vec::new();
        let r: Result<u32, AgentError> = with_retry(policy, |a| {
            seen.push(a.n);
            async move {
                if a.n < 2 {
                    Err(AgentError::new(ErrorKind::DaemonUnavailable, "lost"))
                } else {
                    Ok(7)
                }
            }
        })
        .await;
        assert_eq!(r.unwrap(), 7);
        assert_eq!(seen, [0, 1, 2]);
        let mut calls = 0;
        let r: Result<(), AgentError> = with_retry(policy, |_| {
            calls += 1;
            async { Err(AgentError::new(ErrorKind::Conflict, "no")) }
        })
        .await;
        assert_eq!(r.unwrap_err().kind, ErrorKind::Conflict);
        assert_eq!(calls, 1);
    }
}
