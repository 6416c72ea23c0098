//! Token sampling and stop-string matching.
//!
//! [`Sampler`] turns one row of logits into a token id with llama.cpp's default chain:
//! logit bias, repetition / frequency / presence penalties over the last `repeat_last_n`
//! tokens, then either greedy argmax (temperature 0) or top-k → top-p → min-p → temperature
//! → a draw from the softmax. Its random numbers come from its own xoshiro256** generator
//! seeded from a `u64`, so a seed reproduces a run across platforms and dependency updates.
//! All buffers are sized to the vocabulary at construction: sampling allocates nothing.
//!
//! [`StopMatcher`] watches the streamed text for stop strings, holding back any tail that
//! could still turn into one.

#![forbid(unsafe_code)]

use thiserror::Error;

/// Errors of sampler configuration and use.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SamplingError {
    #[error("sampler parameter {name} = {value} is invalid: expected {expected}")]
    InvalidParam {
        name: &'static str,
        value: f64,
        expected: &'static str,
    },
    #[error("vocabulary size must be between 1 and 2^32, got {0}")]
    BadVocabSize(usize),
    #[error("logit bias names token {token}, outside the vocabulary of {n_vocab}")]
    BiasTokenOutOfRange { token: u32, n_vocab: usize },
    #[error("got {got} logits for a vocabulary of {n_vocab}")]
    LogitsLength { got: usize, n_vocab: usize },
}

/// Sampling parameters. Neutral values switch a stage off: `top_k` 0, `top_p` 1, `min_p` 0,
/// `repeat_penalty` 1, `repeat_last_n` 0, the two additive penalties 0.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// Softmax temperature; 0 means greedy (argmax, ties to the lowest id).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability sums to `top_p`.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the most likely one's.
    pub min_p: f32,
    /// Divides positive logits and multiplies negative ones of recently seen tokens.
    pub repeat_penalty: f32,
    /// How many of the most recent history tokens the penalties look at.
    pub repeat_last_n: usize,
    /// Subtracted from a seen token's logit once per occurrence.
    pub frequency_penalty: f32,
    /// Subtracted once from the logit of every seen token.
    pub presence_penalty: f32,
    /// Seed of the sampler's random number generator.
    pub seed: u64,
    /// Added to the logits of the given tokens (`f32::NEG_INFINITY` bans a token).
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for SamplerConfig {
    /// llama.cpp's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, penalties off.
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: 0x5EED_B17E_7000_0001,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplerConfig {
    /// Greedy decoding: temperature 0 and no penalties.
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..Self::default()
        }
    }

    /// Checks every value; `n_vocab` bounds the logit-bias token ids.
    pub fn validate(&self, n_vocab: usize) -> Result<(), SamplingError> {
        fn check(
            name: &'static str,
            value: f32,
            ok: bool,
            expected: &'static str,
        ) -> Result<(), SamplingError> {
            if ok && !value.is_nan() {
                Ok(())
            } else {
                Err(SamplingError::InvalidParam {
                    name,
                    value: f64::from(value),
                    expected,
                })
            }
        }
        let t = self.temperature;
        check(
            "temperature",
            t,
            t.is_finite() && t >= 0.0,
            "a finite value >= 0",
        )?;
        let p = self.top_p;
        check("top_p", p, p > 0.0 && p <= 1.0, "a value in (0, 1]")?;
        let m = self.min_p;
        check("min_p", m, (0.0..=1.0).contains(&m), "a value in [0, 1]")?;
        let r = self.repeat_penalty;
        check(
            "repeat_penalty",
            r,
            r.is_finite() && r > 0.0,
            "a finite value > 0",
        )?;
        let f = self.frequency_penalty;
        check("frequency_penalty", f, f.is_finite(), "a finite value")?;
        let pp = self.presence_penalty;
        check("presence_penalty", pp, pp.is_finite(), "a finite value")?;
        for &(token, bias) in &self.logit_bias {
            if token as usize >= n_vocab {
                return Err(SamplingError::BiasTokenOutOfRange { token, n_vocab });
            }
            check("logit_bias", bias, bias < f32::INFINITY, "finite or -inf")?;
        }
        Ok(())
    }

    fn penalties_active(&self) -> bool {
        self.repeat_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.frequency_penalty != 0.0
                || self.presence_penalty != 0.0)
    }
}

/// xoshiro256** (Blackman & Vigna), seeded through splitmix64. Small, fast, and fixed here
/// so that seeded runs never change with a dependency update.
#[derive(Debug, Clone)]
pub struct Xoshiro256 {
    s: [u64; 4],
}

impl Xoshiro256 {
    /// A generator whose whole state derives from `seed`.
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Xoshiro256 {
            s: [next(), next(), next(), next()],
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[derive(Debug, Clone, Copy)]
struct Candidate {
    id: u32,
    logit: f32,
}

/// Index of the largest logit, the lowest on ties; NaN never wins; 0 for an empty row.
fn argmax_logits(logits: &[f32]) -> u32 {
    let mut best = 0;
    let mut best_val = f32::NEG_INFINITY;
    for (i, &l) in logits.iter().enumerate() {
        if l > best_val {
            best = i;
            best_val = l;
        }
    }
    best as u32
}

/// NaN means impossible; +inf is clamped so that softmax stays finite.
fn sanitize(logit: f32) -> f32 {
    if logit.is_nan() {
        f32::NEG_INFINITY
    } else {
        logit.min(f32::MAX)
    }
}

/// Descending logit, ties by ascending id, so the order (and thus sampling) is deterministic.
fn by_logit_desc(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// A configured sampler with buffers for one vocabulary; see the module docs.
#[derive(Debug, Clone)]
pub struct Sampler {
    cfg: SamplerConfig,
    n_vocab: usize,
    rng: Xoshiro256,
    candidates: Vec<Candidate>,
    probs: Vec<f32>,
    counts: Vec<u32>,
    /// The only tokens the next sample may pick (sorted), when restricted.
    next_allowed: Option<Vec<u32>>,
    /// The logits row with masked tokens made impossible ([`Sampler::sample_masked`]).
    masked: Vec<f32>,
}

impl Sampler {
    /// Validates `cfg` and allocates the buffers for `n_vocab` tokens.
    pub fn new(cfg: SamplerConfig, n_vocab: usize) -> Result<Sampler, SamplingError> {
        if n_vocab == 0 || u32::try_from(n_vocab - 1).is_err() {
            return Err(SamplingError::BadVocabSize(n_vocab));
        }
        cfg.validate(n_vocab)?;
        let counts = if cfg.penalties_active() {
            vec![0; n_vocab]
        } else {
            Vec::new()
        };
        Ok(Sampler {
            rng: Xoshiro256::new(cfg.seed),
            cfg,
            n_vocab,
            candidates: Vec::with_capacity(n_vocab),
            probs: Vec::with_capacity(n_vocab),
            counts,
            next_allowed: None,
            masked: Vec::new(),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Vocabulary size the sampler was built for.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Restarts the random sequence from `seed`.
    pub fn reseed(&mut self, seed: u64) {
        self.rng = Xoshiro256::new(seed);
    }

    /// As [`Sampler::sample`], but a logits row of the wrong length is an error.
    pub fn try_sample(&mut self, logits: &[f32], history: &[u32]) -> Result<u32, SamplingError> {
        if logits.len() != self.n_vocab {
            return Err(SamplingError::LogitsLength {
                got: logits.len(),
                n_vocab: self.n_vocab,
            });
        }
        Ok(self.sample(logits, history))
    }

    /// Picks the next token from `logits` (one per vocabulary entry) given the tokens
    /// generated or read so far (`history`, oldest first; ids outside the vocabulary are
    /// ignored). NaN logits count as impossible. If the row is longer than the vocabulary
    /// the excess is ignored; an empty row yields token 0.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        match self.next_allowed.take() {
            Some(allowed) => self.sample_among(&allowed, logits, history),
            None => self.sample_row(logits, history),
        }
    }

    /// As [`Sampler::sample`], but only tokens whose bit is set in `mask` may be picked (bit
    /// `t % 32` of word `t / 32`; structured output's token mask). The chain runs on the
    /// masked row, so top-k, top-p and min-p choose among allowed tokens only. When every
    /// allowed logit is impossible (NaN or -inf) the lowest allowed token is taken: the mask
    /// holds even on a broken row. An all-zero mask yields token 0.
    pub fn sample_masked(&mut self, logits: &[f32], history: &[u32], mask: &[u32]) -> u32 {
        let n = logits.len().min(self.n_vocab);
        let mut masked = std::mem::take(&mut self.masked);
        masked.clear();
        masked.resize(n, f32::NEG_INFINITY);
        let mut first = None;
        for (w, &bits) in mask.iter().enumerate() {
            let mut bits = bits;
            while bits != 0 {
                let t = w * 32 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if t >= n {
                    break;
                }
                first.get_or_insert(t as u32);
                masked[t] = logits[t];
            }
        }
        let token = self.sample(&masked, history);
        self.masked = masked;
        let allowed = |t: u32| {
            let t = t as usize;
            mask.get(t / 32).is_some_and(|&w| w & (1 << (t % 32)) != 0)
        };
        if allowed(token) {
            token
        } else {
            first.unwrap_or(0)
        }
    }

    /// Lets the next [`Sampler::sample`] pick only among `allowed` (the others count as
    /// impossible); the samples after it are free again. Token healing uses this: the
    /// reply's first token must begin with the text taken off the end of the prompt.
    /// An empty list lifts the restriction.
    pub fn restrict_next(&mut self, mut allowed: Vec<u32>) {
        allowed.sort_unstable();
        allowed.dedup();
        self.next_allowed = (!allowed.is_empty()).then_some(allowed);
    }

    /// Samples with every token outside `allowed` (sorted) made impossible. When every
    /// allowed logit is already impossible (NaN or -inf), the first allowed token is taken:
    /// the restriction holds even on a broken row.
    fn sample_among(&mut self, allowed: &[u32], logits: &[f32], history: &[u32]) -> u32 {
        let n = logits.len().min(self.n_vocab);
        let mut masked = vec![f32::NEG_INFINITY; n];
        for &t in allowed.iter().filter(|&&t| (t as usize) < n) {
            masked[t as usize] = logits[t as usize];
        }
        let token = self.sample_row(&masked, history);
        if allowed.binary_search(&token).is_ok() {
            token
        } else {
            allowed[0]
        }
    }

    fn sample_row(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let n = logits.len().min(self.n_vocab);
        if self.cfg.temperature == 0.0
            && self.cfg.logit_bias.is_empty()
            && !self.cfg.penalties_active()
        {
            // Plain greedy: no candidate list needed.
            return argmax_logits(&logits[..n]);
        }
        self.candidates.clear();
        self.candidates
            .extend(logits[..n].iter().enumerate().map(|(i, &l)| Candidate {
                id: i as u32,
                logit: sanitize(l),
            }));
        if self.candidates.is_empty() {
            return 0;
        }
        for &(token, bias) in &self.cfg.logit_bias {
            if let Some(c) = self.candidates.get_mut(token as usize) {
                c.logit = sanitize(c.logit + bias);
            }
        }
        self.apply_penalties(history);

        if self.cfg.temperature == 0.0 {
            return self.argmax();
        }
        let sorted = self.apply_top_k();
        let sorted = self.apply_top_p(sorted);
        self.apply_min_p(sorted);
        self.draw()
    }

    /// Penalties, llama.cpp semantics: for each distinct token among the last
    /// `repeat_last_n` of `history`, seen `c` times, the logit `l` becomes
    /// `(l > 0 ? l / repeat : l * repeat) - c * frequency - presence`.
    fn apply_penalties(&mut self, history: &[u32]) {
        if !self.cfg.penalties_active() {
            return;
        }
        let window = &history[history.len().saturating_sub(self.cfg.repeat_last_n)..];
        let n = self.candidates.len();
        for &t in window {
            if (t as usize) < n {
                self.counts[t as usize] += 1;
            }
        }
        let (rp, fp, pp) = (
            self.cfg.repeat_penalty,
            self.cfg.frequency_penalty,
            self.cfg.presence_penalty,
        );
        for &t in window {
            let t = t as usize;
            // Each distinct token is penalised once: its count is zeroed when applied.
            if t >= n || self.counts[t] == 0 {
                continue;
            }
            let count = std::mem::take(&mut self.counts[t]);
            let c = &mut self.candidates[t];
            if c.logit == f32::NEG_INFINITY {
                continue;
            }
            c.logit = if c.logit > 0.0 {
                c.logit / rp
            } else {
                c.logit * rp
            };
            c.logit = sanitize(c.logit - (count as f32 * fp + pp));
        }
    }

    fn argmax(&self) -> u32 {
        let mut best = self.candidates[0];
        for &c in &self.candidates[1..] {
            if c.logit > best.logit {
                best = c;
            }
        }
        best.id
    }

    /// Keeps the `top_k` best candidates, sorted. Without top-k the candidates stay in id
    /// order: later stages sort only what they must (sorting 100k+ logits per token costs
    /// milliseconds).
    fn apply_top_k(&mut self) -> bool {
        let k = self.cfg.top_k;
        if k > 0 && k < self.candidates.len() {
            self.candidates.select_nth_unstable_by(k - 1, by_logit_desc);
            self.candidates.truncate(k);
        }
        if k > 0 {
            self.candidates.sort_unstable_by(by_logit_desc);
            return true;
        }
        false
    }

    fn max_logit(&self) -> f32 {
        self.candidates
            .iter()
            .fold(f32::NEG_INFINITY, |m, c| m.max(c.logit))
    }

    /// Softmax of the candidates (in their current order) at `temperature` into `probs`.
    fn softmax_into_probs(&mut self, temperature: f32) {
        let max = self.max_logit();
        self.probs.clear();
        let mut sum = 0.0f64;
        for c in &self.candidates {
            let p = if max == f32::NEG_INFINITY {
                // Every candidate is impossible: fall back to a uniform choice.
                1.0
            } else {
                ((c.logit - max) / temperature).exp()
            };
            sum += f64::from(p);
            self.probs.push(p);
        }
        let inv = (1.0 / sum) as f32;
        for p in &mut self.probs {
            *p *= inv;
        }
    }

    /// Keeps the smallest most-likely prefix whose probability (normalised over all current
    /// candidates) reaches `top_p`; leaves the candidates sorted.
    fn apply_top_p(&mut self, sorted: bool) -> bool {
        let top_p = f64::from(self.cfg.top_p);
        if top_p >= 1.0 {
            return sorted;
        }
        let max = self.max_logit();
        if max == f32::NEG_INFINITY {
            return sorted;
        }
        // Unnormalised probabilities e_i = exp(l_i - max) (the best token has 1).
        self.probs.clear();
        self.probs
            .extend(self.candidates.iter().map(|c| (c.logit - max).exp()));
        let z: f64 = self.probs.iter().map(|&e| f64::from(e)).sum();
        let target = top_p * z;
        if !sorted {
            // The kept prefix lies among the tokens above a logit cut whose mass already
            // reaches the target: find such a cut, drop the rest, sort only the survivors.
            let mut cut = -1.0f32;
            while cut > -128.0 {
                let mass: f64 = self
                    .candidates
                    .iter()
                    .zip(&self.probs)
                    .filter(|(c, _)| c.logit - max >= cut)
                    .map(|(_, &e)| f64::from(e))
                    .sum();
                if mass >= target {
                    self.candidates.retain(|c| c.logit - max >= cut);
                    break;
                }
                cut *= 2.0;
            }
            self.candidates.sort_unstable_by(by_logit_desc);
        }
        let mut cum = 0.0f64;
        let mut keep = self.candidates.len();
        for (i, c) in self.candidates.iter().enumerate() {
            cum += f64::from((c.logit - max).exp());
            if cum >= target {
                keep = i + 1;
                break;
            }
        }
        self.candidates.truncate(keep.max(1));
        true
    }

    fn apply_min_p(&mut self, sorted: bool) {
        let min_p = self.cfg.min_p;
        if min_p <= 0.0 {
            return;
        }
        // p_i >= min_p * p_max  <=>  l_i >= l_max + ln(min_p).
        let threshold = self.max_logit() + min_p.ln();
        if sorted {
            let keep = self.candidates.partition_point(|c| c.logit >= threshold);
            self.candidates.truncate(keep.max(1));
        } else {
            // The best candidate always passes, so at least one is kept.
            self.candidates.retain(|c| c.logit >= threshold);
        }
    }

    fn draw(&mut self) -> u32 {
        self.softmax_into_probs(self.cfg.temperature);
        let r = self.rng.next_f64() as f32;
        let mut cum = 0.0f32;
        for (c, &p) in self.candidates.iter().zip(&self.probs) {
            cum += p;
            if r < cum {
                return c.id;
            }
        }
        // Rounding left `cum` just under `r`: take the last token with any probability.
        self.candidates
            .iter()
            .zip(&self.probs)
            .rev()
            .find(|(_, p)| **p > 0.0)
            .map_or(self.candidates[0].id, |(c, _)| c.id)
    }
}

/// Result of feeding text to a [`StopMatcher`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopFeed<'a> {
    /// Text that can be shown now: no stop string can start inside it.
    pub emit: &'a str,
    /// A stop string was found; `emit` is the text before it and generation should end.
    pub stopped: bool,
}

/// Finds stop strings in streamed text. Feed each decoded chunk to [`StopMatcher::feed`] and
/// show what it returns; when generation ends for another reason (EOS, token limit) call
/// [`StopMatcher::finish`] for the text that was held back.
#[derive(Debug, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    buf: String,
    emitted: usize,
    stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> Self {
        let stops: Vec<String> = stops.into_iter().filter(|s| !s.is_empty()).collect();
        let cap = stops.iter().map(String::len).max().unwrap_or(0) * 2 + 64;
        StopMatcher {
            stops,
            buf: String::with_capacity(cap),
            emitted: 0,
            stopped: false,
        }
    }

    /// Whether a stop string has been seen (everything fed afterwards is dropped).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Appends `chunk` to the stream and returns the text now safe to show.
    pub fn feed(&mut self, chunk: &str) -> StopFeed<'_> {
        if self.stopped {
            return StopFeed {
                emit: "",
                stopped: true,
            };
        }
        self.buf.drain(..self.emitted);
        self.emitted = 0;
        self.buf.push_str(chunk);
        // Earliest match wins; at one position the longest stop string wins.
        let hit = self
            .stops
            .iter()
            .filter_map(|s| {
                self.buf
                    .find(s.as_str())
                    .map(|at| (at, usize::MAX - s.len()))
            })
            .min();
        if let Some((at, _)) = hit {
            self.stopped = true;
            self.buf.truncate(at);
            self.emitted = at;
            return StopFeed {
                emit: &self.buf,
                stopped: true,
            };
        }
        let safe = self.buf.len() - self.held_back();
        self.emitted = safe;
        StopFeed {
            emit: &self.buf[..safe],
            stopped: false,
        }
    }

    /// Length of the longest tail of `buf` that is a proper prefix of some stop string.
    fn held_back(&self) -> usize {
        let mut hold = 0;
        for stop in &self.stops {
            let max = (stop.len() - 1).min(self.buf.len());
            for len in (hold + 1..=max).rev() {
                let start = self.buf.len() - len;
                if self.buf.is_char_boundary(start)
                    && stop.as_bytes().starts_with(&self.buf.as_bytes()[start..])
                {
                    hold = len;
                    break;
                }
            }
        }
        hold
    }

    /// Ends the stream without a stop: returns the held-back text (empty after a stop).
    pub fn finish(&mut self) -> &str {
        if self.stopped {
            return "";
        }
        self.buf.drain(..self.emitted);
        self.emitted = self.buf.len();
        &self.buf
    }
}
