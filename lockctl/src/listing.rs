//! [`list`]: every key a pattern matches, sorted into locks, keys that are not locks and
//! idempotency records; lockcore's other auxiliary keys are left out.

use std::collections::BTreeSet;

use crate::conn::Target;
use crate::error::CtlError;
use crate::idem::{self, IdemRecord};
use crate::record::{self, Found, LockRecord, OtherKey};

/// What `list` and `watch` show.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Sorted by key.
    pub(crate) locks: Vec<LockRecord>,
    /// Keys of another Redis type than a string, sorted by key.
    pub(crate) others: Vec<OtherKey>,
    /// Sorted by idempotency key.
    pub(crate) idem: Vec<IdemRecord>,
}

impl Listing {
    /// A listing of one key, as `inspect` found it.
    pub(crate) fn of(found: Found) -> Listing {
        let mut listing = Listing::default();
        match found {
            Found::Lock(lock) => listing.locks.push(lock),
            Found::NotALock(other) => listing.others.push(other),
        }
        listing
    }

    /// A listing of one idempotency record.
    pub(crate) fn of_record(record: IdemRecord) -> Listing {
        Listing {
            idem: vec![record],
            ..Listing::default()
        }
    }
}

/// Every key matching `pattern` (`SCAN`, any type), read: the locks, the keys of other types
/// (not locks), and the idempotency records found by a record key or a running call's lock
/// key. Keys that vanish meanwhile are left out.
pub(crate) async fn list(
    target: &mut Target,
    prefix: &str,
    pattern: &str,
) -> Result<Listing, CtlError> {
    let keys = target.scan_keys(pattern).await?;
    let mut listing = Listing::default();
    let mut idem_keys = BTreeSet::new();
    for key in keys {
        if let Ok(text) = std::str::from_utf8(&key) {
            if let Some(idem_key) = idem::idempotency_key(prefix, text) {
                idem_keys.insert(idem_key.to_owned());
                continue;
            }
            if lockcore::keyspace::is_auxiliary_key(prefix, text) {
                continue;
            }
        }
        match record::read(target, prefix, &key).await? {
            Some(Found::Lock(lock)) => listing.locks.push(lock),
            Some(Found::NotALock(other)) => listing.others.push(other),
            None => {}
        }
    }
    for idem_key in idem_keys {
        if let Some(record) = idem::read_idempotency(target, prefix, &idem_key, false).await? {
            listing.idem.push(record);
        }
    }
    Ok(listing)
}
