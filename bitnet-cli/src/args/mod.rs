//! The flags several subcommands share, each group a clap `Args` struct that the
//! subcommands flatten, and what the flags turn into: load and engine options ([`model`]),
//! a context mode ([`context`]), structured output ([`grammar`]), an embedding's pooling
//! ([`pooling`]), the attention-entropy gauge ([`attn_entropy`]), the chat template's help
//! ([`chat_template`]), prompts ([`prompt`]) and their clean-up ([`clean_input`]), a sampler
//! ([`sampling`]), speculative decoding ([`speculate`]); and
//! llama.cpp's spellings of flags, read before clap parses ([`llama_spellings`]); negative
//! numbers as the values of numeric flags, so their parsers refuse them
//! ([`negative_numbers`]).

pub mod attn_entropy;
pub mod chat_template;
pub mod clean_input;
pub mod context;
pub mod grammar;
pub mod llama_spellings;
pub mod model;
pub mod negative_numbers;
pub mod pooling;
pub mod prompt;
pub mod sampling;
pub mod speculate;
