//! A light JSON value for rendering: strings borrowed from the line when
//! they hold no escape, objects as vectors of pairs (no hashing, key order
//! kept). Parsing through it costs a fraction of `serde_json::Value`
//! (no map inserts, few allocations), which is most of the rendering's
//! time on large transcripts.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// One JSON value (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub enum J<'a> {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(Cow<'a, str>),
    Arr(Vec<J<'a>>),
    Obj(Vec<(Cow<'a, str>, J<'a>)>),
}

/// `f` when it is a whole number JavaScript holds exactly (|f| <= 2^53).
fn whole(f: f64) -> Option<i64> {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    (f.fract() == 0.0 && f.abs() <= EXACT).then_some(f as i64)
}

/// The value of a missing key.
pub static NULL: J<'static> = J::Null;

impl<'a> J<'a> {
    /// Parses one JSON text.
    ///
    /// Errors: serde_json's syntax errors (with line and column).
    pub fn parse(bytes: &'a [u8]) -> serde_json::Result<J<'a>> {
        serde_json::from_slice(bytes)
    }

    /// The value of a `serde_json::Value` (strings owned). Recurses once
    /// per level of `v`: only for values whose depth the store's scanner
    /// bounded ([`crate::store::json::KEPT_DEPTH`]).
    pub fn from_value(v: serde_json::Value) -> J<'static> {
        use serde_json::Value as V;
        match v {
            V::Null => J::Null,
            V::Bool(b) => J::Bool(b),
            V::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => J::U64(u),
                (None, Some(i)) => J::I64(i),
                _ => J::F64(n.as_f64().unwrap_or(f64::NAN)),
            },
            V::String(s) => J::Str(Cow::Owned(s)),
            V::Array(a) => J::Arr(a.into_iter().map(J::from_value).collect()),
            V::Object(o) => J::Obj(
                o.into_iter()
                    .map(|(k, v)| (Cow::Owned(k), J::from_value(v)))
                    .collect(),
            ),
        }
    }

    /// The value of `key` in an object (the last one of a repeated key, as
    /// `JSON.parse` keeps).
    pub fn get(&self, key: &str) -> Option<&J<'a>> {
        match self {
            J::Obj(pairs) => pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            J::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The number as a `u64` when it is a whole number in range, as
    /// JavaScript sees numbers: `104`, `104.0` and `1.04e2` are one value
    /// (the write path accepts each as `seq` 104).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            J::U64(n) => Some(*n),
            J::F64(f) => whole(*f).and_then(|i| u64::try_from(i).ok()),
            _ => None,
        }
    }

    /// As [`J::as_u64`], for an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            J::U64(n) => i64::try_from(*n).ok(),
            J::I64(n) => Some(*n),
            J::F64(f) => whole(*f),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[J<'a>]> {
        match self {
            J::Arr(v) => Some(v),
            _ => None,
        }
    }

    pub fn is_object(&self) -> bool {
        matches!(self, J::Obj(_))
    }

    pub fn is_string(&self) -> bool {
        matches!(self, J::Str(_))
    }

    pub fn is_integer(&self) -> bool {
        matches!(self, J::U64(_) | J::I64(_))
    }

    pub fn is_true(&self) -> bool {
        matches!(self, J::Bool(true))
    }
}

struct JVisitor;

impl<'de> Visitor<'de> for JVisitor {
    type Value = J<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<J<'de>, E> {
        Ok(J::Null)
    }
    fn visit_none<E>(self) -> Result<J<'de>, E> {
        Ok(J::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<J<'de>, E> {
        Ok(J::Bool(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<J<'de>, E> {
        Ok(J::U64(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<J<'de>, E> {
        Ok(if v >= 0 { J::U64(v as u64) } else { J::I64(v) })
    }
    fn visit_f64<E>(self, v: f64) -> Result<J<'de>, E> {
        Ok(J::F64(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<J<'de>, E> {
        Ok(J::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<J<'de>, E> {
        Ok(J::Str(Cow::Owned(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<J<'de>, E> {
        Ok(J::Str(Cow::Owned(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J<'de>, A::Error> {
        let mut v = Vec::new();
        while let Some(x) = seq.next_element()? {
            v.push(x);
        }
        Ok(J::Arr(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J<'de>, A::Error> {
        let mut pairs = Vec::new();
        while let Some(k) = map.next_key::<Key<'de>>()? {
            pairs.push((k.0, map.next_value()?));
        }
        Ok(J::Obj(pairs))
    }
}

impl<'de> Deserialize<'de> for J<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<J<'de>, D::Error> {
        d.deserialize_any(JVisitor)
    }
}

/// An object key, borrowed when it holds no escape.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key<'de>, D::Error> {
        match J::deserialize(d)? {
            J::Str(s) => Ok(Key(s)),
            _ => Err(serde::de::Error::custom(
                "an object key that is not a string",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_serde_json() {
        let line = br#"{"type":"a\"b","n":-3,"u":7,"f":1.5,"x":[true,null,{"k":"v"}]}"#;
        let j = J::parse(line).unwrap();
        assert_eq!(j.get("type").and_then(J::as_str), Some("a\"b"));
        assert_eq!(j.get("n").and_then(J::as_i64), Some(-3));
        assert_eq!(j.get("u").and_then(J::as_u64), Some(7));
        assert_eq!(j.get("x").and_then(J::as_array).map(<[J]>::len), Some(3));
        assert!(J::parse(b"{\"a\":").is_err());
        assert!(J::parse(b"{\"a\":1} x").is_err());
    }
}
