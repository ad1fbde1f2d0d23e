"""SonicSpec sampler: logit processing, sampling and speculative verification.

Where things are: `params.SamplingParams` (one request's settings), `batch.SamplingBatch`
(a batch packed into device tensors), `grammar` (xgrammar bitmasks), `rng` (stateless
random numbers), `processing` + `sampling` + `torch_backend` (the reference backend, which is
the specification below), `api` (`Sampler`, `sample`, `verify`).

Semantics (every backend must compute exactly this; float32 throughout, bf16/fp16 upcast)
------------------------------------------------------------------------------------------
Processing order at each position:

1. Grammar: tokens the xgrammar bitmask disallows get -inf.
2. Repetition penalty r over the *set* of prompt + generated tokens: l > 0 -> l / r, else
   l * r (CTRL, Keskar et al. 2019, as Hugging Face `RepetitionPenaltyLogitsProcessor` and
   vLLM apply it).
3. Frequency f and presence p penalties over generated tokens only: l - f * count, then
   - p * [count > 0] (OpenAI API reference, "frequency and presence penalties"; vLLM).
4. Logit bias: the value is added (OpenAI `logit_bias`).
5. Temperature: l / T. T = 0 means greedy: the token is the argmax of the scores after steps
   1-4, ties to the lowest id (torch.argmax); the filters below then only shape its logprobs
   (computed at T = 1).
6. Top-k: keep l > -inf and l >= the k-th largest processed logit; boundary ties are kept
   (Hugging Face `TopKLogitsWarper`, vLLM). k = 0 is off.
7. Top-p (Holtzman et al. 2020) on the softmax of the top-k survivors (the full vocabulary
   when top-k is off; never a truncated candidate set): sort p descending, c = the first
   index whose inclusive cumsum is >= top_p (clamped to the last kept token if rounding
   never reaches it), p* = sorted_p[c], keep p >= p*. top_p = 1 is a no-op.
   Claim: this keeps i iff M_i = (mass of tokens strictly more probable than i) < top_p, so
   the crossing token and all its ties are kept and the result does not depend on how the
   sort orders ties. Proof (exact arithmetic): the tokens with p > p* are exactly those
   sorted before the first occurrence of p*, which is at index <= c. If p_i >= p*, every
   token strictly more probable than i has p > p*, so M_i <= cumsum[first(p*) - 1] <=
   cumsum[c - 1] < top_p (c is the first index reaching top_p). If p_i < p*, every token at
   sorted index 0..c has p >= p* > p_i, so M_i >= cumsum[c] >= top_p. The condition
   "M_i < top_p" mentions only the multiset of probabilities, hence tie order is irrelevant.
   (In float32 the cumsum's rounding may differ between backends in the last bit.)
8. Min-p (Nguyen et al. 2024): keep exp(l - l_max) >= min_p, l_max the largest kept logit; a
   ratio to the most probable token, unchanged by renormalisation. min_p = 0 is off.
   Masked (-inf) tokens are never kept by any step.

Sampling: w_i = exp(l_i - l_max) for kept tokens (float32), else 0; S = sum w; the token is the
smallest id i with cumsum(w)[i] > u * S in *token-id order* (not sorted order, so a tiled
kernel can pick a tile by mass and then a token inside it), the prefix sums and S taken in
float64 (a float32 prefix over 10^5 tokens drifts by ~1e-6 * S, which would decide draws
near a boundary by summation order); if rounding finds none, the last token with positive
weight. u = uniform(seed, position, SAMPLE). A row with no allowed token at all
emits id 0 (its logprob is -inf or NaN): the engine must not ask for it.

Logprobs (0..20 per request): log of the processed, renormalised law (log_softmax of the
filtered logits; for greedy rows the T = 1 law with the filters applied): the chosen token's
logprob and the top n (ids, logprobs) sorted descending.

Randomness (`sampler.rng`): stateless and counter-based, uniform(seed, position, stream)
from the lowbias32 hash, with independent streams SAMPLE (sampling and the bonus token),
ACCEPT (acceptance), RESIDUAL (resampling at the first rejection) and DRAFT (the draft
model's sampling, for the engine). `position` is the absolute position of the token being
produced (len(prompt) + len(output) for the next token; pos0 + j at draft position j). A
seeded request's tokens therefore do not depend on batch size, order, neighbours or backend.
Unseeded requests get `rng.random_seed()` at admission.

Verification (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
Decoding"; Chen et al. 2023, "Accelerating LLM Decoding with Speculative Sampling"): the
target law p_j at draft position j is processed as above, with the row's drafts before j
counted as generated tokens for the penalties and position j's own grammar bitmask.
- Stochastic row: accept draft x_j iff u * q_j(x_j) < p_j(x_j), u = uniform(seed, pos0 + j,
  ACCEPT); that is probability min(1, p/q) with no division: q(x) = 0 < p(x) accepts,
  p(x) = 0 rejects (never NaN). At the first rejection emit a draw (inverse CDF, RESIDUAL
  stream at pos0 + j) from max(p_j - q_j, 0) normalised; if that is all zero (p == q in
  float32) draw from p_j instead with the same uniform.
- Without draft probabilities the draft is deterministic: q is one-hot at x (accept with
  probability p(x); the residual is p with x removed).
- Greedy row: accept while x_j equals the argmax of p_j's scores; at the first mismatch emit
  that argmax.
- All num_draft[b] drafts accepted: a bonus token is drawn from p at position num_draft[b]
  (SAMPLE stream at pos0 + num_draft[b]; argmax when greedy), so a row with num_draft = 0 is
  exactly `sample`. An out-of-vocab draft has p(x) = 0: it is rejected and touches no other
  row. Emitted tokens' logprobs are under the target law p_j.
"""

from sampler.api import Sampler, resolve_backend, sample, verify
from sampler.batch import SamplingBatch
from sampler.outputs import SampleOutput, VerifyOutput
from sampler.params import SamplingParams
from sampler.rng import Stream, random_seed
from sampler.sampling import sample_from_probs

__all__ = [
    "SampleOutput",
    "Sampler",
    "SamplingBatch",
    "SamplingParams",
    "Stream",
    "VerifyOutput",
    "random_seed",
    "resolve_backend",
    "sample",
    "sample_from_probs",
    "verify",
]
