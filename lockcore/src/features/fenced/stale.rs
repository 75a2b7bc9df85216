//! [`StaleWrite`] and [`FenceError`]: why a fenced resource refused a write.

/// A write was rejected because the resource already accepted a newer fencing token: the
/// writer's lease has ended and another holder has written since. Also the rejection of token
/// 0, the token of a guard acquired with [`FencingCounter::Off`](crate::protocol::fencing::FencingCounter::Off):
/// fencing is off, and such a guard can fence nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct StaleWrite {
    /// What was written to: the Redis key, the table and row, or the [`FenceGate`](crate::FenceGate)'s name.
    pub resource: String,
    /// The fencing token the rejected write carried.
    pub presented: u64,
    /// The newest token the resource has accepted; greater than `presented`, except for a
    /// refused token 0 (fencing off), where it may be 0 too.
    pub latest: u64,
}

impl StaleWrite {
    /// A refusal of a write whose guard was acquired with fencing off.
    pub(crate) fn fencing_off(resource: &str, latest: u64) -> Self {
        StaleWrite {
            resource: resource.to_owned(),
            presented: crate::protocol::fencing::NO_FENCING_TOKEN,
            latest,
        }
    }

    /// `true` when the write was refused because its guard has no fencing token
    /// ([`FencingCounter::Off`](crate::protocol::fencing::FencingCounter::Off)), not because a newer holder wrote.
    pub fn is_fencing_off(&self) -> bool {
        self.presented == crate::protocol::fencing::NO_FENCING_TOKEN
    }

    fn describe(&self) -> String {
        if self.is_fencing_off() {
            format!(
                "write to `{}` refused: fencing token 0 comes from a lock acquired with FencingCounter::Off (fencing is off); acquire with a fencing counter to write to a fenced resource",
                self.resource
            )
        } else {
            format!(
                "stale write to `{}` rejected: fencing token {} is older than {}, the newest token it has accepted",
                self.resource, self.presented, self.latest
            )
        }
    }
}

/// Why a [`FencedRedis::set`](crate::FencedRedis::set) did not write.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The resource holds a newer fencing token: this writer is a stale holder.
    #[error(transparent)]
    Stale(#[from] StaleWrite),
    /// Redis answered with an error (for example `WRONGTYPE` when the key is not a hash), the
    /// connection failed, or the value did not encode to exactly one argument. Whether the write
    /// happened is unknown when the reply was lost; retrying with the same token is safe.
    #[error("fenced write failed: {0}")]
    Redis(#[from] redis::RedisError),
}

impl FenceError {
    /// `true` for [`FenceError::Stale`]: a newer holder has written; stop and do not retry.
    pub fn is_stale(&self) -> bool {
        matches!(self, FenceError::Stale(_))
    }
}
