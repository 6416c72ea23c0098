//! How many tokens a reply may take when its caller names no limit (a chat without `-n`, a
//! server request without `max_tokens`): the rule lives here once, so `bitnet chat`, `bitnet
//! serve` and the chat page (which sends no `max_tokens` unless asked) agree.
//!
//! llama-server's default (`n_predict` -1) is "until the model stops or the context is
//! full". A model that never ends its turn (the shipped Shakespeare model, any base model)
//! then fills the whole context with its first reply, and the conversation has no room left:
//! a chat drops its older messages on every turn, and a client that sends the whole history
//! back gets a refusal at its second turn. A share of the context instead leaves room for the
//! turns around each reply: an eighth lets a conversation hold several exchanges before the
//! oldest must go (three short exchanges fit the shipped model's 256 positions with room to
//! spare), and is still a long reply on a real model (512 tokens of a 4096-token context).
//! The floor keeps a reply worth reading on a small context; the caller still cuts the
//! budget to the room its prompt leaves.

/// The fewest tokens the default budget gives a reply, however small the context.
pub const MIN_DEFAULT_REPLY_TOKENS: usize = 32;

/// The default budget is this fraction (1 / N) of the context.
pub const DEFAULT_REPLY_CONTEXT_DIVISOR: usize = 8;

/// Tokens a reply may take by default in a context of `n_ctx` positions per sequence: an
/// eighth of the context, at least [`MIN_DEFAULT_REPLY_TOKENS`]. Callers cut it to the room
/// the prompt leaves (see [`crate::scheduler::GenParams::room`]).
pub fn default_reply_budget(n_ctx: usize) -> usize {
    (n_ctx / DEFAULT_REPLY_CONTEXT_DIVISOR).max(MIN_DEFAULT_REPLY_TOKENS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eighth_of_the_context_with_a_floor() {
        assert_eq!(default_reply_budget(256), 32);
        assert_eq!(default_reply_budget(4096), 512);
        assert_eq!(default_reply_budget(4100), 512, "rounded down");
        assert_eq!(default_reply_budget(128), MIN_DEFAULT_REPLY_TOKENS);
        assert_eq!(default_reply_budget(0), MIN_DEFAULT_REPLY_TOKENS);
    }

    /// The acceptance the rule was tuned for: three exchanges of short messages on the
    /// shipped model's context, each turn needing its prompt plus a whole budget.
    #[test]
    fn three_short_exchanges_fit_a_256_token_context() {
        let n_ctx = 256;
        let budget = default_reply_budget(n_ctx);
        // A generous size for one short user turn: on the shipped model the chat reads 18
        // or 19 tokens a turn (the last reply's end marker, then "User: Farewell, good
        // friend.<|eot_id|>Assistant:"), and three turns end at 146 of its 256 positions.
        let turn = 30;
        assert!(3 * (turn + budget) <= n_ctx - budget, "room to spare");
    }
}
