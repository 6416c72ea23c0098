//! One module per subcommand.

pub mod bench;
pub mod calibrate;
pub mod chat;
pub mod embed;
pub mod gen_model;
pub mod generate;
pub mod inspect;
pub mod logits;
pub mod perplexity;
pub mod render_template;
pub mod serve;
pub mod tokenize;
