//! Redis Cluster hash slots, so that auxiliary keys (the fencing counter, the waiter queue)
//! land in their lock key's slot without any change to the lock key.

use once_cell::sync::Lazy;

/// A short hash tag whose slot is `lock_key`'s slot: `{tag}` in an auxiliary key's name puts
/// that key in the lock key's slot.
pub(crate) fn tag_for(lock_key: &str) -> &'static str {
    &SLOT_TAGS[usize::from(key_hash_slot(lock_key.as_bytes()))]
}

const SLOTS: usize = 16_384;

/// The Redis Cluster hash slot of `key`: CRC16-XMODEM of the hash tag (the part between the
/// first `{` and the next `}`, when non-empty) or of the whole key, modulo 16 384.
pub(crate) fn key_hash_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS as u16
}

/// `items` split into one group per hash slot of `key_of(item)`, in slot order; each group
/// keeps the items' order. Every item lands in exactly one group.
pub(crate) fn group_by_slot<T>(items: Vec<T>, key_of: impl Fn(&T) -> &str) -> Vec<Vec<T>> {
    let mut groups: std::collections::BTreeMap<u16, Vec<T>> = Default::default();
    for item in items {
        let slot = key_hash_slot(key_of(&item).as_bytes());
        groups.entry(slot).or_default().push(item);
    }
    groups.into_values().collect()
}

/// Builds the slot tag table now (a few milliseconds, once per process), so that a manager's
/// first acquire does not pay for it.
pub(crate) fn prepare() {
    Lazy::force(&SLOT_TAGS);
}

/// For every slot, a short tag that hashes to it. Built once, by counting in base 36 until
/// every slot has a tag (about 160 000 CRC16 computations, a few milliseconds).
static SLOT_TAGS: Lazy<Vec<String>> = Lazy::new(|| {
    let mut tags: Vec<Option<String>> = vec![None; SLOTS];
    let mut missing = SLOTS;
    let mut n: u64 = 0;
    // Bounded: 36^4 candidates are far more than enough to cover 16 384 slots.
    while missing > 0 && n < 36u64.pow(4) {
        let tag = base36(n);
        let slot = usize::from(key_hash_slot(tag.as_bytes()));
        if tags[slot].is_none() {
            tags[slot] = Some(tag);
            missing -= 1;
        }
        n += 1;
    }
    tags.into_iter()
        .map(|tag| tag.unwrap_or_default())
        .collect()
});

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_matches_the_redis_cluster_spec() {
        // CRC16-XMODEM check value from the Redis Cluster spec.
        assert_eq!(
            crc16::State::<crc16::XMODEM>::calculate(b"123456789"),
            0x31c3
        );
        assert_eq!(
            key_hash_slot(b"{user1000}.following"),
            key_hash_slot(b"user1000")
        );
        assert_eq!(key_hash_slot(b"foo{}{bar}"), key_hash_slot(b"foo{}{bar}"));
        assert_ne!(key_hash_slot(b"foo{}{bar}"), key_hash_slot(b"bar"));
    }

    #[test]
    fn groups_by_slot_keep_every_item_once() {
        let keys = ["a", "{a}x", "b", "{a}y", "c", "b"];
        let groups = group_by_slot(keys.to_vec(), |k| k);
        assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), keys.len());
        for group in &groups {
            let slot = key_hash_slot(group[0].as_bytes());
            assert!(group.iter().all(|k| key_hash_slot(k.as_bytes()) == slot));
        }
        let with_a = groups.iter().find(|g| g.contains(&"a"));
        assert_eq!(with_a, Some(&vec!["a", "{a}x", "{a}y"]), "in order");
        assert!(group_by_slot(Vec::<&str>::new(), |k| k).is_empty());
    }

    #[test]
    fn every_slot_has_a_tag() {
        assert!(SLOT_TAGS.iter().all(|t| !t.is_empty()));
    }
}
