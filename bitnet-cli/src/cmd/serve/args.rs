//! The flags of `bitnet serve` (llama.cpp's server spellings where it has them).

use std::path::PathBuf;

use crate::args::attn_entropy::AttnEntropyArgs;
use crate::args::context::ContextArgs;
use crate::args::model::ModelArgs;
use crate::args::pooling::POOLING_NAMES;
use crate::args::speculate::SpeculateArgs;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The GGUF model file (models/shakespeare.gguf ships with the repository). Repeat it
    /// to serve several models, each named by its file stem: the first is the default, the
    /// one a request that names no `model` gets.
    #[arg(
        short = 'm',
        long,
        value_name = "FILE",
        required_unless_present = "models_dir"
    )]
    pub model: Vec<PathBuf>,
    /// Serve every *.gguf in this directory too (subdirectories are not read); without -m
    /// the first file by name is the default model.
    #[arg(long, value_name = "DIR")]
    pub models_dir: Option<PathBuf>,
    /// Another name a request may use for a model: STEM=NAME, STEM being the model's file
    /// stem (repeatable). --alias names the default model.
    #[arg(long, value_name = "STEM=NAME")]
    pub model_alias: Vec<String>,
    /// Models loaded at once when several are served (llama-server's flag); past it the
    /// least recently used idle one is unloaded before the next loads. 0: no limit.
    #[arg(long, default_value_t = 4)]
    pub models_max: usize,
    /// MiB the loaded models may take at once (each counted as its file's size plus its
    /// KV cache), enforced as --models-max is. Default: no budget.
    #[arg(long, value_name = "MIB")]
    pub models_memory_max: Option<u64>,
    /// Address to listen on; loopback unless you mean to serve other machines.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port; the address is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Requests decoded together (llama.cpp's -np); -c is shared by all of them.
    #[arg(long = "parallel", visible_alias = "np", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub parallel: u32,
    /// Requests that may wait for a place beyond --parallel; more get 503 with Retry-After.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Require this key (`Authorization: Bearer KEY` or `X-Api-Key: KEY`) on every route
    /// but the health checks; repeat it or give a comma-separated list for several.
    #[arg(long, value_name = "KEY")]
    pub api_key: Vec<String>,
    /// Read API keys from this file: one a line, blank lines and `#` comments skipped.
    #[arg(long)]
    pub api_key_file: Option<PathBuf>,
    /// Let pages from this origin call the server from a browser (CORS): scheme://host[:port],
    /// scheme://host:* for any port, or * for any origin; repeatable or comma-separated.
    /// Default: none.
    #[arg(long, visible_alias = "cors-origins", value_name = "ORIGIN")]
    pub cors_origin: Vec<String>,
    /// Seconds a request may take before it is cancelled (504, or an error event when
    /// streaming): 1 to 31536000 (a year).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_S))]
    pub timeout: u64,
    /// Request bodies larger than this many bytes get 413.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// Tokens to generate when a request gives no max_tokens, cut to the room its prompt
    /// leaves. Default: an eighth of the context, at least 32 (32 on the shipped model's
    /// 256), so a conversation sent back whole keeps room for its next turn; -1: until the
    /// context is full (llama-server's default).
    #[arg(short = 'n', long = "n-predict", allow_negative_numbers = true, value_parser = parse_n_predict)]
    pub n_predict: Option<usize>,
    /// Model name in /v1/models and answers (default: the file name). With several models,
    /// another name of the default model (see --model-alias for the others).
    #[arg(long)]
    pub alias: Option<String>,
    #[arg(long, value_name = "NAME|FILE", help = crate::args::chat_template::help())]
    pub chat_template: Option<String>,
    /// Seconds in-flight requests get to finish after SIGINT/SIGTERM before they are
    /// cancelled (their answers then end with an error) and every connection is closed.
    #[arg(long, default_value_t = 10)]
    pub shutdown_timeout: u64,
    /// Connections open at once (kept below the open-file limit). At the cap a new one
    /// replaces the longest-waiting connection without a request; when all are serving,
    /// it gets 503.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
    /// Seconds a client may take to send a request's header (from connecting, or from its
    /// first byte after an idle spell), and may pause while sending its body (then 408).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_S))]
    pub read_timeout: u64,
    /// Seconds a keep-alive connection may stay idle between requests before it is closed:
    /// longer than a proxy's own (nginx and AWS ALB keep 60 s), or the proxy may send on a
    /// connection as it closes.
    #[arg(long, default_value_t = 75, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_S))]
    pub idle_timeout: u64,
    /// Serve no chat page at `/` (the API only; `/` is then a 404).
    #[arg(long)]
    pub no_webui: bool,
    /// Serve embeddings (llama-server's flag): POST /v1/embeddings (OpenAI's shape),
    /// /embeddings and /embedding (llama-server's), from the model's final hidden states;
    /// the completion routes then answer 501.
    #[arg(long, visible_alias = "embedding")]
    pub embeddings: bool,
    /// With --embeddings: none (a vector a token; not on /v1/embeddings), mean, cls (the
    /// first token's) or last (default: the file's pooling_type, else last).
    #[arg(long, value_parser = POOLING_NAMES, requires = "embeddings")]
    pub pooling: Option<String>,
    /// Keep the prefix cache on disk in this folder: after each answered request the rows
    /// the cache holds of its prompt and answer are written there (unless a file holds
    /// them already), and at start every file of the same model, kernel set and settings
    /// is put back into the cache before the server says it is ready, so a restart does not
    /// read long prompts again. Damaged files are reported and skipped.
    #[arg(long, value_name = "DIR")]
    pub prefix_cache_dir: Option<PathBuf>,
    /// MiB of files --prefix-cache-dir keeps per model (the oldest go first).
    #[arg(
        long,
        value_name = "MIB",
        default_value_t = 4096,
        requires = "prefix_cache_dir"
    )]
    pub prefix_cache_max_mib: u64,
    /// Folder of llama-server's slot files: POST /slots/{id}?action=save|restore with
    /// {"filename": NAME} writes a slot's KV there or puts it back into the cache.
    #[arg(long, value_name = "DIR")]
    pub slot_save_path: Option<PathBuf>,
    /// Sleep this many milliseconds after every engine step: makes a tiny test model as
    /// slow as a big one (tests of queueing and disconnects).
    #[arg(long, default_value_t = 0, hide = true)]
    pub step_delay_ms: u64,
    /// The default clean-up of requests that do not set their `clean_input` field.
    #[command(flatten)]
    pub clean: crate::args::clean_input::CleanInputArgs,
    #[command(flatten)]
    pub context: ContextArgs,
    #[command(flatten)]
    pub attn_entropy: AttnEntropyArgs,
    #[command(flatten)]
    pub speculate: SpeculateArgs,
    #[command(flatten)]
    pub model_args: ModelArgs,
}

/// The longest `--timeout`: a request's deadline is `now + timeout`, which must stay a
/// representable instant (a larger value used to panic the request's task).
const MAX_TIMEOUT_S: u64 = 365 * 24 * 3600;

/// `-n`: a token count, or -1 for "until the context is full" (`usize::MAX`).
fn parse_n_predict(s: &str) -> Result<usize, String> {
    match s.trim() {
        "-1" => Ok(usize::MAX),
        t => t
            .parse()
            .map_err(|_| format!("{s:?} is not a token count: give a number >= 0, or -1")),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_n_predict;

    #[test]
    fn n_predict_is_a_count_or_minus_one_for_the_whole_context() {
        assert_eq!(parse_n_predict("17"), Ok(17));
        assert_eq!(parse_n_predict("-1"), Ok(usize::MAX));
        assert!(parse_n_predict("-2").unwrap_err().contains("-1"));
    }
}
