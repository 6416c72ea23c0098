//! A heap buffer whose start is 64-byte aligned (one cache line, one AVX-512 register), for
//! repacked weights and activation buffers. Only plain-old-data element types whose all-zero
//! bit pattern is a valid value may be stored, so a fresh buffer is simply zeroed memory.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment of every [`AlignedVec`], in bytes.
pub const ALIGN: usize = 64;

mod sealed {
    pub trait Sealed {}
}

/// Element types an [`AlignedVec`] may hold: `Copy`, no padding, all-zero bits a valid value.
pub trait AlignedElem: Copy + Default + sealed::Sealed + 'static {}

macro_rules! elem {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl AlignedElem for $t {}
    )*};
}
elem!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// A fixed-length, zero-initialised, 64-byte aligned buffer.
pub struct AlignedVec<T: AlignedElem> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: the buffer is uniquely owned, like a `Vec<T>`; `T` is plain data.
unsafe impl<T: AlignedElem + Send> Send for AlignedVec<T> {}
// SAFETY: shared access only hands out `&[T]`.
unsafe impl<T: AlignedElem + Sync> Sync for AlignedVec<T> {}

impl<T: AlignedElem> AlignedVec<T> {
    fn layout(len: usize) -> Layout {
        let bytes = len
            .checked_mul(size_of::<T>())
            .expect("AlignedVec size overflows usize");
        Layout::from_size_align(bytes.max(1), ALIGN).expect("AlignedVec layout")
    }

    /// A buffer of `len` zeroes.
    pub fn zeroed(len: usize) -> Self {
        if len == 0 || size_of::<T>() == 0 {
            // A dangling pointer that still honours the 64-byte alignment promise.
            let ptr = NonNull::new(std::ptr::without_provenance_mut::<T>(ALIGN)).expect("non-null");
            return AlignedVec { ptr, len };
        }
        let layout = Self::layout(len);
        // SAFETY: the layout has non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<T>()) else {
            alloc::handle_alloc_error(layout)
        };
        AlignedVec { ptr, len }
    }

    /// A copy of `src`.
    pub fn from_slice(src: &[T]) -> Self {
        let mut v = Self::zeroed(src.len());
        v.copy_from_slice(src);
        v
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` is valid for `len` initialised (zeroed or written) elements, or
        // dangling-but-aligned with `len == 0`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`, and `&mut self` guarantees unique access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: AlignedElem> Drop for AlignedVec<T> {
    fn drop(&mut self) {
        if self.len != 0 && size_of::<T>() != 0 {
            // SAFETY: allocated in `zeroed` with exactly this layout.
            unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.len)) }
        }
    }
}

impl<T: AlignedElem> Deref for AlignedVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: AlignedElem> DerefMut for AlignedVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<T: AlignedElem> Clone for AlignedVec<T> {
    fn clone(&self) -> Self {
        Self::from_slice(self)
    }
}

impl<T: AlignedElem> fmt::Debug for AlignedVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedVec")
            .field("len", &self.len)
            .field("elem", &std::any::type_name::<T>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_writable() {
        for len in [0usize, 1, 63, 64, 1000] {
            let mut v = AlignedVec::<i8>::zeroed(len);
            assert_eq!(v.as_ptr() as usize % ALIGN, 0);
            assert!(v.iter().all(|&x| x == 0));
            if len > 0 {
                v[len - 1] = 7;
                assert_eq!(v.clone()[len - 1], 7);
            }
        }
        let f = AlignedVec::<f32>::from_slice(&[1.0, 2.0, 3.0]);
        assert_eq!(f.as_ptr() as usize % ALIGN, 0);
        assert_eq!(&f[..], &[1.0, 2.0, 3.0]);
    }
}
