//! Which instruction set the kernels run on: detected once per process, or forced by the
//! user (`BITNET_KERNEL=scalar|avx2|avxvnni|avx512|neon|dotprod|i8mm`, `--kernel` in the CLI) to rule
//! out a SIMD bug.

use std::fmt;
use std::sync::OnceLock;

use crate::error::KernelError;

/// Environment variable that forces a kernel set for the whole process.
pub const KERNEL_ENV: &str = "BITNET_KERNEL";

/// A kernel set. Within one architecture, ordered from least to most capable; a CPU only ever
/// runs scalar and the sets of its own architecture.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Portable Rust, the reference for every kernel.
    Scalar,
    /// AVX2 + FMA + F16C (Haswell and later, Zen).
    Avx2,
    /// AVX2 + the VEX-encoded VNNI `vpdpbusd` (Intel client cores since Alder Lake, Sierra
    /// Forest and Sapphire Rapids servers, Zen 5).
    AvxVnni,
    /// AVX-512 F/BW/VL/DQ + VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later).
    Avx512,
    /// AArch64 Advanced SIMD (every ARMv8-A core: Apple M, Cortex-A53 and later, Graviton).
    Neon,
    /// NEON + the ARMv8.2 dot products SDOT/UDOT (Apple M1 and later, Cortex-A76 as in the
    /// Raspberry Pi 5, Neoverse N1 / Graviton 2 and later).
    Dotprod,
    /// Dotprod + the ARMv8.6 int8 matrix multiply SMMLA (Apple M2 and later, Graviton 3,
    /// Neoverse V1/N2).
    I8mm,
}

impl Isa {
    pub const ALL: [Isa; 7] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::AvxVnni,
        Isa::Avx512,
        Isa::Neon,
        Isa::Dotprod,
        Isa::I8mm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
            Isa::Dotprod => "dotprod",
            Isa::I8mm => "i8mm",
        }
    }

    pub fn parse(name: &str) -> Result<Isa, KernelError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "scalar" => Ok(Isa::Scalar),
            "avx2" => Ok(Isa::Avx2),
            "avxvnni" | "avx-vnni" => Ok(Isa::AvxVnni),
            "avx512" | "avx-512" => Ok(Isa::Avx512),
            "neon" => Ok(Isa::Neon),
            "dotprod" => Ok(Isa::Dotprod),
            "i8mm" => Ok(Isa::I8mm),
            _ => Err(KernelError::UnknownIsa {
                name: name.to_string(),
            }),
        }
    }

    /// The CPU feature this set needs that the CPU lacks, if any.
    pub fn missing_feature(self) -> Option<&'static str> {
        match self {
            Isa::Scalar => None,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                if !std::is_x86_feature_detected!("avx2") {
                    Some("avx2")
                } else if !std::is_x86_feature_detected!("fma") {
                    Some("fma")
                } else if !std::is_x86_feature_detected!("f16c") {
                    Some("f16c")
                } else {
                    None
                }
            }
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => Isa::Avx2
                .missing_feature()
                .or_else(|| (!std::is_x86_feature_detected!("avxvnni")).then_some("avxvnni")),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                if let Some(m) = Isa::Avx2.missing_feature() {
                    return Some(m);
                }
                for (ok, name) in [
                    (std::is_x86_feature_detected!("avx512f"), "avx512f"),
                    (std::is_x86_feature_detected!("avx512bw"), "avx512bw"),
                    (std::is_x86_feature_detected!("avx512vl"), "avx512vl"),
                    (std::is_x86_feature_detected!("avx512dq"), "avx512dq"),
                    (std::is_x86_feature_detected!("avx512vnni"), "avx512vnni"),
                ] {
                    if !ok {
                        return Some(name);
                    }
                }
                None
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 => Some("x86_64"),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => (!std::arch::is_aarch64_feature_detected!("neon")).then_some("neon"),
            #[cfg(target_arch = "aarch64")]
            Isa::Dotprod => Isa::Neon.missing_feature().or_else(|| {
                (!std::arch::is_aarch64_feature_detected!("dotprod")).then_some("dotprod")
            }),
            #[cfg(target_arch = "aarch64")]
            Isa::I8mm => Isa::Dotprod
                .missing_feature()
                .or_else(|| (!std::arch::is_aarch64_feature_detected!("i8mm")).then_some("i8mm")),
            #[cfg(not(target_arch = "aarch64"))]
            Isa::Neon | Isa::Dotprod | Isa::I8mm => Some("aarch64"),
        }
    }

    pub fn is_available(self) -> bool {
        self.missing_feature().is_none()
    }

    /// Every kernel set this CPU can run, scalar first.
    pub fn available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_available()).collect()
    }

    /// The most capable set this CPU runs; detected once.
    pub fn best() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            Isa::ALL
                .into_iter()
                .rev()
                .find(|i| i.is_available())
                .unwrap_or(Isa::Scalar)
        })
    }

    /// Checks that this set can run here.
    pub fn require(self) -> Result<Isa, KernelError> {
        match self.missing_feature() {
            None => Ok(self),
            Some(missing) => Err(KernelError::IsaUnavailable {
                isa: self.name(),
                missing,
            }),
        }
    }

    /// The set named by `BITNET_KERNEL` if set (an error if unknown or unavailable), else
    /// [`Isa::best`].
    pub fn from_env() -> Result<Isa, KernelError> {
        match std::env::var(KERNEL_ENV) {
            Ok(v) if !v.trim().is_empty() => Isa::parse(&v)?.require(),
            _ => Ok(Isa::best()),
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Optional extras inside a kernel set, checked where a kernel can use them.
#[cfg(target_arch = "x86_64")]
pub fn has_avx512_vpopcntdq() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| std::is_x86_feature_detected!("avx512vpopcntdq"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trips_and_rejects_unknown() {
        for isa in Isa::ALL {
            assert_eq!(Isa::parse(isa.name()).unwrap(), isa);
        }
        assert!(matches!(
            Isa::parse("sve2"),
            Err(KernelError::UnknownIsa { .. })
        ));
    }
}
