//! What one cluster node says about the cluster: `CLUSTER NODES` parsed, and
//! the key → slot hash.

/// The number of hash slots in a Redis Cluster.
pub const SLOT_COUNT: u16 = 16_384;

/// The hash slot of `key`, as Redis computes it: CRC16 (XMODEM) of the hash
/// tag (the bytes between the first `{` and the next `}`, when not empty) or
/// else of the whole key, modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    crc16_xmodem(hashed) % SLOT_COUNT
}

fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|b| *b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|b| *b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for byte in bytes {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// One node as a `CLUSTER NODES` line describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    id: String,
    port: u16,
    primary_id: Option<String>,
    flags: Vec<String>,
    slots: Vec<(u16, u16)>,
}

impl ClusterNode {
    /// The 40-character node id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The client port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("redis://{}:{}/", crate::ports::HOST, self.port)
    }

    /// Whether the node is a primary (flag `master`).
    pub fn is_primary(&self) -> bool {
        self.has_flag("master")
    }

    /// The id of the primary this node replicates, for a replica.
    pub fn primary_id(&self) -> Option<&str> {
        self.primary_id.as_deref()
    }

    /// Whether the node is flagged failing (`fail` or `fail?`).
    pub fn is_failing(&self) -> bool {
        self.has_flag("fail") || self.has_flag("fail?")
    }

    /// The slot ranges it serves (inclusive), for a primary.
    pub fn slots(&self) -> &[(u16, u16)] {
        &self.slots
    }

    /// Whether this node serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|(lo, hi)| (*lo..=*hi).contains(&slot))
    }

    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

/// The nodes one node knows, from its `CLUSTER NODES` reply.
#[derive(Debug, Clone)]
pub(crate) struct ClusterView {
    pub(crate) nodes: Vec<ClusterNode>,
}

impl ClusterView {
    /// Parse a `CLUSTER NODES` reply. Lines it cannot read are an error.
    pub(crate) fn parse(reply: &str) -> Result<ClusterView, String> {
        let mut nodes = Vec::new();
        for line in reply.lines().filter(|l| !l.trim().is_empty()) {
            nodes.push(parse_line(line).ok_or_else(|| format!("bad CLUSTER NODES line {line:?}"))?);
        }
        Ok(ClusterView { nodes })
    }

    /// The primary that serves `slot` and is not flagged failing.
    pub(crate) fn primary_for_slot(&self, slot: u16) -> Option<&ClusterNode> {
        self.nodes
            .iter()
            .find(|n| n.is_primary() && !n.is_failing() && n.serves(slot))
    }

    /// The replicas of the primary with id `primary_id`.
    pub(crate) fn replicas_of<'a>(
        &'a self,
        primary_id: &'a str,
    ) -> impl Iterator<Item = &'a ClusterNode> + 'a {
        self.nodes
            .iter()
            .filter(move |n| n.primary_id() == Some(primary_id))
    }
}

/// `<id> <ip:port@cport[,hostname]> <flags> <primary|-> <ping> <pong> <epoch> <link> <slot>...`
fn parse_line(line: &str) -> Option<ClusterNode> {
    let mut fields = line.split_whitespace();
    let id = fields.next()?.to_owned();
    let addr = fields.next()?;
    let port = addr.split('@').next()?.rsplit(':').next()?.parse().ok()?;
    let flags = fields.next()?.split(',').map(str::to_owned).collect();
    let primary = fields.next()?;
    let primary_id = (primary != "-").then(|| primary.to_owned());
    let mut fields = fields.skip(4); // ping-sent, pong-recv, config-epoch, link-state
    let mut slots = Vec::new();
    for range in fields.by_ref() {
        if range.starts_with('[') {
            continue; // `[slot->-id]` / `[slot-<-id]`: a migration in progress
        }
        let (lo, hi) = match range.split_once('-') {
            Some((lo, hi)) => (lo.parse().ok()?, hi.parse().ok()?),
            None => {
                let slot = range.parse().ok()?;
                (slot, slot)
            }
        };
        slots.push((lo, hi));
    }
    Some(ClusterNode {
        id,
        port,
        primary_id,
        flags,
        slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_slots_match_redis() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.0.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"123456789"), 0x31C3 % SLOT_COUNT);
    }

    #[test]
    fn parses_primaries_replicas_and_migrations() {
        let reply = "\
aaa 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [5461->-bbb]
bbb 127.0.0.1:7001@17001,host master - 0 0 2 connected 5461-10922 16000
ccc 127.0.0.1:7002@17002 slave aaa 0 0 1 connected
ddd 127.0.0.1:7003@17003 master,fail - 0 0 3 disconnected 10923-16383
";
        let view = ClusterView::parse(reply).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(view.nodes.len(), 4);
        assert_eq!(
            view.primary_for_slot(5461).map(ClusterNode::port),
            Some(7001)
        );
        assert_eq!(
            view.primary_for_slot(16000).map(ClusterNode::port),
            Some(7001)
        );
        assert_eq!(view.primary_for_slot(0).map(ClusterNode::id), Some("aaa"));
        assert_eq!(view.primary_for_slot(12000), None, "failing primary");
        let replicas: Vec<u16> = view.replicas_of("aaa").map(ClusterNode::port).collect();
        assert_eq!(replicas, vec![7002]);
        assert!(ClusterView::parse("garbage").is_err());
    }
}
