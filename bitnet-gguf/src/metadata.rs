//! The key/value metadata of a GGUF file: kept in file order (so a rewrite reproduces it) and
//! indexed by key, with typed getters whose errors name the key.

use std::collections::HashMap;

use crate::error::GgufError;
use crate::value::{Array, Value};

/// Ordered metadata: iteration is in insertion (file) order; look-up is by key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

macro_rules! int_getters {
    ($($get:ident, $opt:ident, $t:ty, $name:literal;)*) => {$(
        #[doc = concat!("The value of `key` as ", $name, ". Any integer type is accepted if the ",
            "value fits losslessly; `MissingKey`, `WrongType` or `IntOutOfRange` otherwise.")]
        pub fn $get(&self, key: &str) -> Result<$t, GgufError> {
            self.$opt(key)?.ok_or_else(|| missing(key))
        }

        #[doc = concat!("Like [`Metadata::", stringify!($get), "`], but `Ok(None)` if the key is absent.")]
        pub fn $opt(&self, key: &str) -> Result<Option<$t>, GgufError> {
            let Some(v) = self.get(key) else { return Ok(None) };
            let Some(i) = v.as_int() else {
                return Err(wrong(key, $name, v));
            };
            <$t>::try_from(i).map(Some).map_err(|_| GgufError::IntOutOfRange {
                key: key.to_owned(),
                value: i,
                expected: $name,
            })
        }
    )*};
}

macro_rules! plain_getters {
    ($($get:ident, $opt:ident, $t:ty, $name:literal, $pat:pat => $out:expr;)*) => {$(
        #[doc = concat!("The value of `key` as ", $name, "; `MissingKey` or `WrongType` otherwise.")]
        pub fn $get(&self, key: &str) -> Result<$t, GgufError> {
            self.$opt(key)?.ok_or_else(|| missing(key))
        }

        #[doc = concat!("Like [`Metadata::", stringify!($get), "`], but `Ok(None)` if the key is absent.")]
        pub fn $opt(&self, key: &str) -> Result<Option<$t>, GgufError> {
            match self.get(key) {
                None => Ok(None),
                Some($pat) => Ok(Some($out)),
                Some(v) => Err(wrong(key, $name, v)),
            }
        }
    )*};
}

macro_rules! array_getters {
    ($($get:ident, $opt:ident, $t:ty, $variant:ident, $name:literal;)*) => {$(
        #[doc = concat!("The array at `key`, which must have ", $name, " elements.")]
        pub fn $get(&self, key: &str) -> Result<&[$t], GgufError> {
            self.$opt(key)?.ok_or_else(|| missing(key))
        }

        #[doc = concat!("Like [`Metadata::", stringify!($get), "`], but `Ok(None)` if the key is absent.")]
        pub fn $opt(&self, key: &str) -> Result<Option<&[$t]>, GgufError> {
            match self.get(key) {
                None => Ok(None),
                Some(Value::Array(Array::$variant(v))) => Ok(Some(v)),
                Some(v) => Err(wrong(key, concat!("array<", $name, ">"), v)),
            }
        }
    )*};
}

fn missing(key: &str) -> GgufError {
    GgufError::MissingKey {
        key: key.to_owned(),
    }
}

fn wrong(key: &str, expected: &'static str, found: &Value) -> GgufError {
    GgufError::WrongType {
        key: key.to_owned(),
        expected,
        found: found.type_name(),
    }
}

impl Metadata {
    /// Empty metadata.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key`. A new key goes at the end; an existing key keeps its position.
    pub fn insert(&mut self, key: impl Into<String>, v: impl Into<Value>) {
        let key = key.into();
        let v = v.into();
        match self.index.get(&key) {
            Some(&i) => self.entries[i].1 = v,
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, v));
            }
        }
    }

    /// Removes `key`, returning its value; later entries keep their order.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.index.remove(key)?;
        let (_, v) = self.entries.remove(i);
        for slot in self.index.values_mut() {
            if *slot > i {
                *slot -= 1;
            }
        }
        Some(v)
    }

    /// The value at `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// Entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    int_getters! {
        get_u8, get_opt_u8, u8, "u8";
        get_u16, get_opt_u16, u16, "u16";
        get_u32, get_opt_u32, u32, "u32";
        get_u64, get_opt_u64, u64, "u64";
        get_i32, get_opt_i32, i32, "i32";
        get_i64, get_opt_i64, i64, "i64";
        get_usize, get_opt_usize, usize, "usize";
    }

    plain_getters! {
        get_f32, get_opt_f32, f32, "f32", Value::F32(x) => *x;
        get_f64, get_opt_f64, f64, "f64", &Value::F64(x) => x;
        get_bool, get_opt_bool, bool, "bool", Value::Bool(x) => *x;
        get_str, get_opt_str, &str, "string", Value::String(s) => s.as_str();
        get_array, get_opt_array, &Array, "array", Value::Array(a) => a;
    }

    array_getters! {
        get_str_array, get_opt_str_array, String, String, "string";
        get_f32_array, get_opt_f32_array, f32, F32, "f32";
        get_i32_array, get_opt_i32_array, i32, I32, "i32";
        get_u32_array, get_opt_u32_array, u32, U32, "u32";
        get_u8_array, get_opt_u8_array, u8, U8, "u8";
    }

    /// An f64 view of a float value: accepts f32 (widened exactly) and f64.
    pub fn get_float(&self, key: &str) -> Result<f64, GgufError> {
        match self.get(key) {
            None => Err(missing(key)),
            Some(Value::F32(x)) => Ok(f64::from(*x)),
            Some(Value::F64(x)) => Ok(*x),
            Some(v) => Err(wrong(key, "f32 or f64", v)),
        }
    }

    /// Any integer array widened to i64 (token types are i32 in some files, u32 or u8 in
    /// others).
    pub fn get_int_array(&self, key: &str) -> Result<Vec<i64>, GgufError> {
        let a = self.get_array(key)?;
        a.to_i64_vec().ok_or_else(|| GgufError::WrongType {
            key: key.to_owned(),
            expected: "array of integers that fit in i64",
            found: a.type_name(),
        })
    }

    /// `general.architecture`, the prefix of the model's hyperparameter keys.
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.get_str("general.architecture")
    }
}

impl<K: Into<String>, V: Into<Value>> FromIterator<(K, V)> for Metadata {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = Metadata::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md() -> Metadata {
        let mut m = Metadata::new();
        m.insert("a.u8", 7u8);
        m.insert("a.i32neg", -3i32);
        m.insert("a.u64big", u64::MAX);
        m.insert("a.f32", 1.5f32);
        m.insert("a.s", "hi");
        m.insert("a.toks", vec!["x".to_string(), "y".to_string()]);
        m.insert("a.types", vec![1i32, 2, 3]);
        m
    }

    #[test]
    fn integer_getters_widen_losslessly() {
        let m = md();
        assert_eq!(m.get_u32("a.u8").unwrap(), 7);
        assert_eq!(m.get_i64("a.u8").unwrap(), 7);
        assert_eq!(m.get_i32("a.i32neg").unwrap(), -3);
        assert!(matches!(
            m.get_u32("a.i32neg"),
            Err(GgufError::IntOutOfRange {
                value: -3,
                expected: "u32",
                ..
            })
        ));
        assert!(matches!(
            m.get_i64("a.u64big"),
            Err(GgufError::IntOutOfRange { .. })
        ));
        assert_eq!(m.get_u64("a.u64big").unwrap(), u64::MAX);
        match m.get_u32("a.f32") {
            Err(GgufError::WrongType {
                key,
                expected,
                found,
            }) => {
                assert_eq!((key.as_str(), expected, found), ("a.f32", "u32", "f32"))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(m.get_u32("nope"), Err(GgufError::MissingKey { key }) if key == "nope"));
        assert_eq!(m.get_opt_u32("nope").unwrap(), None);
        assert!(m.get_opt_u32("a.s").is_err());
    }

    #[test]
    fn other_getters() {
        let m = md();
        assert_eq!(m.get_f32("a.f32").unwrap(), 1.5);
        assert_eq!(m.get_float("a.f32").unwrap(), 1.5);
        assert_eq!(m.get_str("a.s").unwrap(), "hi");
        assert_eq!(m.get_str_array("a.toks").unwrap(), ["x", "y"]);
        assert_eq!(m.get_i32_array("a.types").unwrap(), [1, 2, 3]);
        assert_eq!(m.get_int_array("a.types").unwrap(), [1, 2, 3]);
        assert!(matches!(
            m.get_f32_array("a.types"),
            Err(GgufError::WrongType {
                found: "array<i32>",
                ..
            })
        ));
        assert_eq!(m.get_array("a.toks").unwrap().len(), 2);
    }

    #[test]
    fn insert_replaces_in_place_and_remove_keeps_order() {
        let mut m = md();
        m.insert("a.u8", 9u8);
        assert_eq!(m.iter().next().unwrap(), ("a.u8", &Value::U8(9)));
        assert_eq!(m.len(), 7);
        assert_eq!(m.remove("a.i32neg"), Some(Value::I32(-3)));
        let keys: Vec<_> = m.iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            ["a.u8", "a.u64big", "a.f32", "a.s", "a.toks", "a.types"]
        );
        assert_eq!(m.get_str("a.s").unwrap(), "hi");
        assert!(!m.contains("a.i32neg"));
    }
}
