//! One module per subcommand, plus the options they share.

pub mod attn_entropy_args;
pub mod bench;
pub mod chat;
pub mod common;
pub mod context_args;
pub mod gen_model;
pub mod generate;
pub mod inspect;
pub mod limits;
pub mod load_figures;
pub mod logits;
pub mod perplexity;
pub mod perplexity_window;
pub mod prompt;
pub mod serve;
pub mod tokenize;
