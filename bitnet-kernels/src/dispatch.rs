//! The one place a kernel set named by an [`Isa`] becomes kernels: [`kernels`] turns it into a
//! [`Level`], whose [`Kernels`] methods run the ops on the level detected for it. Tests and
//! benches call one set's ops through it; the rest of the workspace uses the safe API modules
//! (`crate::act`, `crate::ternary`, `crate::float`, ...), which check shapes and then make
//! one call, `kernels(isa).op(...)`.
//!
//! A set this CPU cannot run is lowered to the best one it can (AVX-512 to AVX-VNNI to AVX2,
//! I8MM to dotprod to NEON, any to scalar): a wrong `Isa` argument costs speed, never
//! soundness. Each SIMD level's token can only be built once its CPU features were detected
//! (once per process, each behind a `OnceLock`).
//!
//! Adding an instruction set is a variant of [`Level`] holding its token type, cfg-gated to
//! its architecture, its arm in [`kernels`], and its arm in `impl_level!` below.

use std::ops::Range;

#[cfg(target_arch = "aarch64")]
use crate::aarch64::{dotprod::Dotprod, i8mm::I8mm, neon::Neon};
use crate::isa::Isa;
use crate::layout::binary::BinaryMatrix;
use crate::layout::kv::KvQuant;
use crate::layout::q4r::Q4R;
use crate::layout::q6kr::Q6KR;
use crate::layout::q8k::Q8KActs;
use crate::layout::q8r::{Q8Acts, Q8R};
use crate::layout::rows::RowFormat;
use crate::layout::ternary::TernaryMatrix;
use crate::ops::{Kernels, Scalar, for_each_op};
#[cfg(target_arch = "x86_64")]
use crate::x86_64::{avx2::Avx2, avx512::Avx512, avxvnni::AvxVnni};

/// A kernel level this CPU runs, holding its proof token: every op is one `match` on it.
#[derive(Copy, Clone, Debug)]
pub enum Level {
    Scalar(Scalar),
    #[cfg(target_arch = "x86_64")]
    Avx2(Avx2),
    #[cfg(target_arch = "x86_64")]
    AvxVnni(AvxVnni),
    #[cfg(target_arch = "x86_64")]
    Avx512(Avx512),
    #[cfg(target_arch = "aarch64")]
    Neon(Neon),
    #[cfg(target_arch = "aarch64")]
    Dotprod(Dotprod),
    #[cfg(target_arch = "aarch64")]
    I8mm(I8mm),
}

/// The kernels to run for `isa`: its set if this CPU runs it, else the best set below it that
/// it runs, else the scalar reference.
#[inline]
pub fn kernels(isa: Isa) -> Level {
    let simd = match isa {
        Isa::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Avx2::new().map(Level::Avx2),
        #[cfg(target_arch = "x86_64")]
        Isa::AvxVnni => AvxVnni::new()
            .map(Level::AvxVnni)
            .or_else(|| Avx2::new().map(Level::Avx2)),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => Avx512::new()
            .map(Level::Avx512)
            .or_else(|| AvxVnni::new().map(Level::AvxVnni))
            .or_else(|| Avx2::new().map(Level::Avx2)),
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 => None,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => Neon::new().map(Level::Neon),
        #[cfg(target_arch = "aarch64")]
        Isa::Dotprod => Dotprod::new()
            .map(Level::Dotprod)
            .or_else(|| Neon::new().map(Level::Neon)),
        #[cfg(target_arch = "aarch64")]
        Isa::I8mm => I8mm::new()
            .map(Level::I8mm)
            .or_else(|| Dotprod::new().map(Level::Dotprod))
            .or_else(|| Neon::new().map(Level::Neon)),
        #[cfg(not(target_arch = "aarch64"))]
        Isa::Neon | Isa::Dotprod | Isa::I8mm => None,
    };
    simd.unwrap_or(Level::Scalar(Scalar))
}

/// [`Level`]'s ops: each calls the op of the token it holds.
macro_rules! impl_level {
    ($( fn $name:ident(self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)? => $module:ident::$func:ident; )*) => {
        impl Kernels for Level {
            // Every op is overridden below: a `Level` never lowers itself.
            type Lower = Scalar;

            #[inline]
            fn lower(self) -> Scalar {
                Scalar
            }

            $(
                #[inline]
                fn $name(self $(, $arg: $ty)*) $(-> $ret)? {
                    match self {
                        Level::Scalar(k) => k.$name($($arg),*),
                        #[cfg(target_arch = "x86_64")]
                        Level::Avx2(k) => k.$name($($arg),*),
                        #[cfg(target_arch = "x86_64")]
                        Level::AvxVnni(k) => k.$name($($arg),*),
                        #[cfg(target_arch = "x86_64")]
                        Level::Avx512(k) => k.$name($($arg),*),
                        #[cfg(target_arch = "aarch64")]
                        Level::Neon(k) => k.$name($($arg),*),
                        #[cfg(target_arch = "aarch64")]
                        Level::Dotprod(k) => k.$name($($arg),*),
                        #[cfg(target_arch = "aarch64")]
                        Level::I8mm(k) => k.$name($($arg),*),
                    }
                }
            )*
        }
    };
}

for_each_op!(impl_level);
