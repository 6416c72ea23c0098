//! The runtime's error type (being extended by the engine work).

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CoreError {
    #[error(transparent)]
    Kernel(#[from] bitnet_kernels::KernelError),
}
