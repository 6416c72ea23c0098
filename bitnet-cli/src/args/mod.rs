//! The flags several subcommands share, each group a clap `Args` struct that the
//! subcommands flatten, and what the flags turn into: load and engine options ([`model`]),
//! a context mode ([`context`]), structured output ([`grammar`]), the attention-entropy gauge
//! ([`attn_entropy`]), prompts ([`prompt`]) and a sampler ([`sampling`]), speculative decoding ([`speculate`]); and llama.cpp's
//! spellings of flags, read before clap parses ([`llama_spellings`]).

pub mod attn_entropy;
pub mod context;
pub mod grammar;
pub mod llama_spellings;
pub mod model;
pub mod prompt;
pub mod sampling;
pub mod speculate;
