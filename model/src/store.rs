//! [`Store`]: the keyspace of one Redis server, as far as lockcore's scripts use it: strings,
//! lists and hashes, each with an optional expiry by the server's clock (ms), and the Redis
//! commands the scripts run, with Redis' replies and `WRONGTYPE` errors.

use std::collections::BTreeMap;

/// The value of one key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Data {
    /// A string (`SET`, `INCR`).
    Str(String),
    /// A list (`RPUSH`, `LPOP`, ...), head first.
    List(Vec<String>),
    /// A hash (`HSET`, `HGET`, ...).
    Hash(BTreeMap<String, String>),
}

impl Data {
    /// `TYPE`'s name of the value.
    pub fn type_name(&self) -> &'static str {
        match self {
            Data::Str(_) => "string",
            Data::List(_) => "list",
            Data::Hash(_) => "hash",
        }
    }
}

/// A key's value and its expiry (ms by the server's clock; `None`: persistent).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stored {
    /// The value.
    pub data: Data,
    /// When the key expires: it is gone once the clock is past this instant (Redis' rule).
    pub expires_at: Option<u64>,
}

/// A command on a key of another type: Redis' `WRONGTYPE` error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrongType;

/// The error text of [`WrongType`], as Redis words it.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// The keyspace and the server's clock.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Store {
    /// The server's clock, in ms (what `TIME` reads).
    pub now: u64,
    keys: BTreeMap<String, Stored>,
}

impl Store {
    /// An empty keyspace at `now`.
    pub fn new(now: u64) -> Self {
        Store {
            now,
            keys: BTreeMap::new(),
        }
    }

    /// Moves the clock to `now` (never back) and drops the keys that expired by then.
    pub fn advance(&mut self, now: u64) {
        self.now = self.now.max(now);
        let clock = self.now;
        self.keys
            .retain(|_, stored| stored.expires_at.is_none_or(|at| clock <= at));
    }

    /// Every live key, in key order.
    pub fn keys(&self) -> impl Iterator<Item = (&String, &Stored)> {
        self.keys.iter()
    }

    /// The live value of `key`.
    pub fn get_stored(&self, key: &str) -> Option<&Stored> {
        self.keys
            .get(key)
            .filter(|stored| stored.expires_at.is_none_or(|at| self.now <= at))
    }

    /// Writes `key` as is (a test's fixture).
    pub fn put(&mut self, key: &str, data: Data, expires_at: Option<u64>) {
        self.keys
            .insert(key.to_owned(), Stored { data, expires_at });
    }

    fn live_mut(&mut self, key: &str) -> Option<&mut Stored> {
        let now = self.now;
        self.keys
            .get_mut(key)
            .filter(|stored| stored.expires_at.is_none_or(|at| now <= at))
    }

    /// `GET`.
    pub fn get(&self, key: &str) -> Result<Option<String>, WrongType> {
        match self.get_stored(key).map(|s| &s.data) {
            None => Ok(None),
            Some(Data::Str(value)) => Ok(Some(value.clone())),
            Some(_) => Err(WrongType),
        }
    }

    /// `TYPE`.
    pub fn type_of(&self, key: &str) -> &'static str {
        self.get_stored(key).map_or("none", |s| s.data.type_name())
    }

    /// `EXISTS` of one key.
    pub fn exists(&self, key: &str) -> bool {
        self.get_stored(key).is_some()
    }

    /// `SET key value [PX ms]`: any old value (of any type) and its expiry are replaced.
    pub fn set(&mut self, key: &str, value: &str, px: Option<u64>) {
        let expires_at = px.map(|ms| self.now + ms);
        self.put(key, Data::Str(value.to_owned()), expires_at);
    }

    /// `DEL` of one key; whether it existed.
    pub fn del(&mut self, key: &str) -> bool {
        let existed = self.exists(key);
        self.keys.remove(key);
        existed
    }

    /// `PEXPIRE key ms` (ms > 0); whether the key existed.
    pub fn pexpire(&mut self, key: &str, ms: u64) -> bool {
        let at = self.now + ms;
        match self.live_mut(key) {
            Some(stored) => {
                stored.expires_at = Some(at);
                true
            }
            None => false,
        }
    }

    /// `PTTL`: -2 for a missing key, -1 for a persistent one, else the ms left.
    pub fn pttl(&self, key: &str) -> i64 {
        match self.get_stored(key) {
            None => -2,
            Some(Stored {
                expires_at: None, ..
            }) => -1,
            Some(Stored {
                expires_at: Some(at),
                ..
            }) => i64::try_from(at - self.now).unwrap_or(i64::MAX),
        }
    }

    /// `INCR` of a counter (a missing key counts as 0). A value that is not a decimal is an
    /// error (Redis: "value is not an integer"); the scripts never meet one.
    pub fn incr(&mut self, key: &str) -> Result<i64, String> {
        let current = match self.get(key) {
            Ok(None) => 0,
            Ok(Some(value)) => value
                .parse::<i64>()
                .map_err(|_| "ERR value is not an integer or out of range".to_owned())?,
            Err(WrongType) => return Err(WRONGTYPE.to_owned()),
        };
        let next = current + 1;
        let expires_at = self.get_stored(key).and_then(|s| s.expires_at);
        self.put(key, Data::Str(next.to_string()), expires_at);
        Ok(next)
    }

    fn list_mut(&mut self, key: &str, create: bool) -> Result<Option<&mut Vec<String>>, WrongType> {
        if create && !self.exists(key) {
            self.put(key, Data::List(Vec::new()), None);
        }
        match self.live_mut(key).map(|s| &mut s.data) {
            None => Ok(None),
            Some(Data::List(list)) => Ok(Some(list)),
            Some(_) => Err(WrongType),
        }
    }

    fn hash_mut(
        &mut self,
        key: &str,
        create: bool,
    ) -> Result<Option<&mut BTreeMap<String, String>>, WrongType> {
        if create && !self.exists(key) {
            self.put(key, Data::Hash(BTreeMap::new()), None);
        }
        match self.live_mut(key).map(|s| &mut s.data) {
            None => Ok(None),
            Some(Data::Hash(hash)) => Ok(Some(hash)),
            Some(_) => Err(WrongType),
        }
    }

    /// Drops `key` when it is an empty list or hash (Redis deletes emptied aggregates).
    fn drop_if_empty(&mut self, key: &str) {
        let empty = match self.get_stored(key).map(|s| &s.data) {
            Some(Data::List(list)) => list.is_empty(),
            Some(Data::Hash(hash)) => hash.is_empty(),
            _ => false,
        };
        if empty {
            self.keys.remove(key);
        }
    }

    /// `LPOP`.
    pub fn lpop(&mut self, key: &str) -> Result<Option<String>, WrongType> {
        let popped = match self.list_mut(key, false)? {
            Some(list) if !list.is_empty() => Some(list.remove(0)),
            _ => None,
        };
        self.drop_if_empty(key);
        Ok(popped)
    }

    /// `LINDEX key 0`.
    pub fn lindex0(&mut self, key: &str) -> Result<Option<String>, WrongType> {
        Ok(self
            .list_mut(key, false)?
            .and_then(|list| list.first().cloned()))
    }

    /// `LPUSH` of one value.
    pub fn lpush(&mut self, key: &str, value: &str) -> Result<(), WrongType> {
        if let Some(list) = self.list_mut(key, true)? {
            list.insert(0, value.to_owned());
        }
        Ok(())
    }

    /// `RPUSH` of one value.
    pub fn rpush(&mut self, key: &str, value: &str) -> Result<(), WrongType> {
        if let Some(list) = self.list_mut(key, true)? {
            list.push(value.to_owned());
        }
        Ok(())
    }

    /// `LREM key 0 value`: every occurrence.
    pub fn lrem_all(&mut self, key: &str, value: &str) -> Result<(), WrongType> {
        if let Some(list) = self.list_mut(key, false)? {
            list.retain(|v| v != value);
        }
        self.drop_if_empty(key);
        Ok(())
    }

    /// `HGET`.
    pub fn hget(&mut self, key: &str, field: &str) -> Result<Option<String>, WrongType> {
        Ok(self
            .hash_mut(key, false)?
            .and_then(|hash| hash.get(field).cloned()))
    }

    /// `HSET` of one field.
    pub fn hset(&mut self, key: &str, field: &str, value: &str) -> Result<(), WrongType> {
        if let Some(hash) = self.hash_mut(key, true)? {
            hash.insert(field.to_owned(), value.to_owned());
        }
        Ok(())
    }

    /// `HDEL` of one field.
    pub fn hdel(&mut self, key: &str, field: &str) -> Result<(), WrongType> {
        if let Some(hash) = self.hash_mut(key, false)? {
            hash.remove(field);
        }
        self.drop_if_empty(key);
        Ok(())
    }
}
