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
///
/// The memory comes from the allocator's zeroed path with its natural alignment and the
/// start is rounded up to 64 bytes inside a slightly larger block: asking for 64-byte
/// alignment directly makes the system allocator allocate and then `memset` the whole
/// buffer, touching every page at once (the repacked weights and the KV pool are hundreds
/// of MiB), where a zeroed allocation of fresh pages (`calloc`) costs nothing until a page
/// is first written.
pub struct AlignedVec<T: AlignedElem> {
    ptr: NonNull<T>,
    len: usize,
    /// The block as allocated (`ptr` lies `< boundary` bytes into it); unused when
    /// `len == 0`.
    base: NonNull<u8>,
    /// The boundary `ptr` was rounded up to ([`ALIGN`] or [`HUGE_PAGE`]); it sizes the block.
    boundary: usize,
}

/// Alignment asked of the allocator: what `calloc` gives on the common 64-bit platforms
/// (and at least the alignment of every [`AlignedElem`]).
const BASE_ALIGN: usize = 16;

const _: () = assert!(BASE_ALIGN >= align_of::<u64>() && BASE_ALIGN >= align_of::<f64>());

/// The transparent huge page size [`AlignedVec::zeroed_huge`] lines buffers up with.
pub const HUGE_PAGE: usize = 2 << 20;

// SAFETY: the buffer is uniquely owned, like a `Vec<T>`; `T` is plain data.
unsafe impl<T: AlignedElem + Send> Send for AlignedVec<T> {}
// SAFETY: shared access only hands out `&[T]`.
unsafe impl<T: AlignedElem + Sync> Sync for AlignedVec<T> {}

impl<T: AlignedElem> AlignedVec<T> {
    /// The allocated block: `len` elements plus room to move the start to `boundary`.
    fn layout(len: usize, boundary: usize) -> Layout {
        let bytes = len
            .checked_mul(size_of::<T>())
            .and_then(|b| b.checked_add(boundary))
            .expect("AlignedVec size overflows usize");
        Layout::from_size_align(bytes, BASE_ALIGN).expect("AlignedVec layout")
    }

    /// A buffer of `len` zeroes.
    pub fn zeroed(len: usize) -> Self {
        Self::zeroed_at(len, ALIGN)
    }

    /// A buffer of `len` zeroes for data written once in full right away (repacked
    /// weights): one of at least [`HUGE_PAGE`] bytes starts on a huge-page boundary and, on
    /// Linux, is marked for transparent huge pages (`MADV_HUGEPAGE`), so filling it takes
    /// one page fault per 2 MiB instead of one per 4 KiB. A hint: where the system does not
    /// give huge pages this is [`AlignedVec::zeroed`]. A buffer that is filled only
    /// gradually (a KV cache) should not use it, as each touched huge page is resident
    /// whole.
    pub fn zeroed_huge(len: usize) -> Self {
        if len.saturating_mul(size_of::<T>()) < HUGE_PAGE {
            return Self::zeroed(len);
        }
        let v = Self::zeroed_at(len, HUGE_PAGE);
        advise_huge_pages(v.as_slice());
        v
    }

    /// A buffer of `len` zeroes starting on a multiple of `boundary` (a power of two, at
    /// least [`ALIGN`]).
    fn zeroed_at(len: usize, boundary: usize) -> Self {
        debug_assert!(boundary.is_power_of_two() && boundary >= ALIGN);
        if len == 0 || size_of::<T>() == 0 {
            // A dangling pointer that still honours the 64-byte alignment promise.
            let ptr = NonNull::new(std::ptr::without_provenance_mut::<T>(ALIGN)).expect("non-null");
            return AlignedVec {
                ptr,
                len,
                base: NonNull::dangling(),
                boundary: ALIGN,
            };
        }
        let layout = Self::layout(len, boundary);
        // SAFETY: the layout has non-zero size (at least `boundary` bytes).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(base) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        let skip = base.as_ptr().align_offset(boundary);
        debug_assert!(skip < boundary && skip.is_multiple_of(BASE_ALIGN));
        // SAFETY: `skip < boundary`, and the block has `len * size_of::<T>() + boundary`
        // bytes, so the `len` elements from `base + skip` lie inside it; `base + skip` is
        // `boundary`-aligned, so aligned for `T`; the bytes are zeroed, a valid `T`
        // (AlignedElem).
        let ptr = unsafe { NonNull::new_unchecked(base.as_ptr().add(skip).cast::<T>()) };
        AlignedVec {
            ptr,
            len,
            base,
            boundary,
        }
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

/// `MADV_HUGEPAGE` on the whole huge pages of `buf` (Linux; elsewhere nothing). Errors are
/// ignored: it is a hint (THP may be disabled, or the kernel built without it).
fn advise_huge_pages<T>(buf: &[T]) {
    #[cfg(target_os = "linux")]
    {
        let start = buf.as_ptr() as usize;
        let from = start.next_multiple_of(HUGE_PAGE);
        let to = (start + size_of_val(buf)) / HUGE_PAGE * HUGE_PAGE;
        if from < to {
            let at = buf.as_ptr().cast::<u8>().wrapping_add(from - start);
            // SAFETY: [from, to) lies inside `buf`, memory this process owns (and starts on
            // a page boundary, as madvise requires); MADV_HUGEPAGE changes how its pages
            // are backed, never their contents, and nothing is dereferenced.
            let _ = unsafe { libc::madvise(at.cast_mut().cast(), to - from, libc::MADV_HUGEPAGE) };
        }
    }
    // Elsewhere no hint: macOS has no transparent huge pages, and Windows' large pages must
    // be allocated as such (VirtualAlloc with MEM_LARGE_PAGES, which needs the "Lock pages
    // in memory" privilege), not advised afterwards.
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}

impl<T: AlignedElem> Drop for AlignedVec<T> {
    fn drop(&mut self) {
        if self.len != 0 && size_of::<T>() != 0 {
            // SAFETY: `base` was allocated in `zeroed_at` with exactly this layout.
            unsafe { alloc::dealloc(self.base.as_ptr(), Self::layout(self.len, self.boundary)) }
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
    fn every_element_type_and_size_is_aligned_and_zero() {
        fn check<T: AlignedElem + PartialEq + fmt::Debug>() {
            // Sizes around the allocator's small, medium and large (fresh pages) paths.
            for len in [1usize, 3, 17, 4096, 100_000, 3 << 20] {
                for (v, align) in [
                    (AlignedVec::<T>::zeroed(len), ALIGN),
                    (AlignedVec::<T>::zeroed_huge(len), ALIGN),
                ] {
                    let mut v = v;
                    assert_eq!(v.as_ptr() as usize % align, 0, "{len}");
                    assert!(v.iter().all(|x| *x == T::default()), "{len}");
                    v[len - 1] = v[0];
                    assert_eq!(v.len(), len);
                }
            }
            // A huge buffer starts on a huge page.
            let v = AlignedVec::<T>::zeroed_huge(HUGE_PAGE / size_of::<T>() + 1);
            assert_eq!(v.as_ptr() as usize % HUGE_PAGE, 0);
        }
        check::<u8>();
        check::<i16>();
        check::<f32>();
        check::<u64>();
        check::<f64>();
    }

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
