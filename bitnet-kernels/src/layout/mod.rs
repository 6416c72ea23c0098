//! The data layouts every kernel set reads and writes, below all of them: the repacked
//! ternary and 1-bit weight matrices and their construction from the file layouts, ggml's
//! weight-row formats, the Q8_0 output head in 16-row groups, the Q8_K activations of a Q6_K head, the quantized KV cache rows
//! and the half-width floats. Plus the shapes the kernels check before indexing those
//! layouts through raw pointers. Nothing here dispatches or imports a kernel tree: the
//! imports run layout -> kernels -> dispatch -> API.

pub mod binary;
pub mod files;
pub mod half;
pub mod kv;
pub mod q4r;
pub mod q6kr;
pub mod q8k;
pub mod q8r;
pub mod repack;
pub mod rows;
pub mod ternary;
