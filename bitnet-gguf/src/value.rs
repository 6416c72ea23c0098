//! Metadata values exactly as GGUF stores them: every scalar type keeps its own width, so a
//! value read and written back produces the same bytes (a `u32` 7 stays a `u32`, not an `i64`).

/// GGUF's metadata value type ids.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    /// 0
    U8 = 0,
    /// 1
    I8 = 1,
    /// 2
    U16 = 2,
    /// 3
    I16 = 3,
    /// 4
    U32 = 4,
    /// 5
    I32 = 5,
    /// 6
    F32 = 6,
    /// 7 (one byte, 0 or 1)
    Bool = 7,
    /// 8 (u64 length + UTF-8 bytes)
    String = 8,
    /// 9 (u32 element type + u64 count + elements)
    Array = 9,
    /// 10
    U64 = 10,
    /// 11
    I64 = 11,
    /// 12
    F64 = 12,
}

impl ValueType {
    /// The type for a file's id, if GGUF defines it.
    pub fn from_id(id: u32) -> Option<ValueType> {
        Some(match id {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => return None,
        })
    }

    /// The smallest number of bytes one value of this type occupies in a file (strings and
    /// arrays: their length fields). Used to reject absurd counts before allocating.
    pub fn min_size(self) -> u64 {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
            ValueType::U64 | ValueType::I64 | ValueType::F64 | ValueType::String => 8,
            ValueType::Array => 12,
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// u8
    U8(u8),
    /// i8
    I8(i8),
    /// u16
    U16(u16),
    /// i16
    I16(i16),
    /// u32
    U32(u32),
    /// i32
    I32(i32),
    /// u64
    U64(u64),
    /// i64
    I64(i64),
    /// f32
    F32(f32),
    /// f64
    F64(f64),
    /// bool
    Bool(bool),
    /// UTF-8 string
    String(String),
    /// homogeneous array
    Array(Array),
}

/// A homogeneous array; nested arrays each carry their own element type.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// u8 elements
    U8(Vec<u8>),
    /// i8 elements
    I8(Vec<i8>),
    /// u16 elements
    U16(Vec<u16>),
    /// i16 elements
    I16(Vec<i16>),
    /// u32 elements
    U32(Vec<u32>),
    /// i32 elements
    I32(Vec<i32>),
    /// u64 elements
    U64(Vec<u64>),
    /// i64 elements
    I64(Vec<i64>),
    /// f32 elements
    F32(Vec<f32>),
    /// f64 elements
    F64(Vec<f64>),
    /// bool elements
    Bool(Vec<bool>),
    /// string elements
    String(Vec<String>),
    /// array elements
    Array(Vec<Array>),
}

impl Value {
    /// The on-disk type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F32(_) => ValueType::F32,
            Value::F64(_) => ValueType::F64,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
        }
    }

    /// A short name of the type for messages: `u32`, `string`, `array<f32>`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(a) => a.type_name(),
        }
    }

    /// The value as a wide integer, if it is one of the integer types.
    pub fn as_int(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// The string, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

impl Array {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
        }
    }

    /// True if there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The on-disk element type.
    pub fn elem_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F32(_) => ValueType::F32,
            Array::F64(_) => ValueType::F64,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
        }
    }

    /// A short name for messages: `array<u32>`, `array<array>`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Array::U8(_) => "array<u8>",
            Array::I8(_) => "array<i8>",
            Array::U16(_) => "array<u16>",
            Array::I16(_) => "array<i16>",
            Array::U32(_) => "array<u32>",
            Array::I32(_) => "array<i32>",
            Array::U64(_) => "array<u64>",
            Array::I64(_) => "array<i64>",
            Array::F32(_) => "array<f32>",
            Array::F64(_) => "array<f64>",
            Array::Bool(_) => "array<bool>",
            Array::String(_) => "array<string>",
            Array::Array(_) => "array<array>",
        }
    }

    /// The elements widened to `i64`, if this is an integer array whose values all fit.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        fn conv<T: Copy>(v: &[T], f: impl Fn(T) -> Option<i64>) -> Option<Vec<i64>> {
            v.iter().map(|&x| f(x)).collect()
        }
        match self {
            Array::U8(v) => conv(v, |x| Some(x.into())),
            Array::I8(v) => conv(v, |x| Some(x.into())),
            Array::U16(v) => conv(v, |x| Some(x.into())),
            Array::I16(v) => conv(v, |x| Some(x.into())),
            Array::U32(v) => conv(v, |x| Some(x.into())),
            Array::I32(v) => conv(v, |x| Some(x.into())),
            Array::U64(v) => conv(v, |x| i64::try_from(x).ok()),
            Array::I64(v) => Some(v.clone()),
            _ => None,
        }
    }
}

macro_rules! from_impls {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Value {
            fn from(x: $t) -> Value { Value::$v(x) }
        }
        impl From<Vec<$t>> for Array {
            fn from(x: Vec<$t>) -> Array { Array::$v(x) }
        }
        impl From<Vec<$t>> for Value {
            fn from(x: Vec<$t>) -> Value { Value::Array(Array::$v(x)) }
        }
    )*};
}
from_impls!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64,
    i64 => I64, f32 => F32, f64 => F64, bool => Bool, String => String);

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_owned())
    }
}

impl From<Array> for Value {
    fn from(a: Array) -> Value {
        Value::Array(a)
    }
}
