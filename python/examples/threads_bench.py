"""Two Python threads calling one ``Llama`` at once against the same two calls one after the
other: the engine decodes concurrent calls together (continuous batching), so the pair
should finish sooner than the sum of its parts. Rounds alternate which way goes first;
prints each round's ratio and the median.

    python python/examples/threads_bench.py MODEL.gguf [--tokens 128] [--rounds 6] [--threads 2]
"""

import argparse
import statistics
import threading
import time

from bitnet import Llama


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=None, help="engine threads")
    args = ap.parse_args()
    llm = Llama(args.model, n_threads=args.threads, verbose=False)
    prompts = ["ROMEO:", "JULIET:"]

    def one(prompt: str) -> None:
        out = llm(prompt, max_tokens=args.tokens, temperature=0, stop=[])
        assert out["usage"]["completion_tokens"] == args.tokens, out["usage"]

    def sequential() -> float:
        t = time.perf_counter()
        for p in prompts:
            one(p)
        return time.perf_counter() - t

    def concurrent() -> float:
        workers = [threading.Thread(target=one, args=(p,)) for p in prompts]
        t = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return time.perf_counter() - t

    one(prompts[0])  # warm-up
    ratios = []
    for r in range(args.rounds):
        if r % 2 == 0:
            seq, con = sequential(), concurrent()
        else:
            con, seq = concurrent(), sequential()
        ratios.append(seq / con)
        print(f"round {r + 1}: one after the other {seq:.3f} s, two threads at once {con:.3f} s, "
              f"speed-up {seq / con:.2f}x")
    print(f"median speed-up {statistics.median(ratios):.2f}x over {args.rounds} rounds "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}), {args.tokens} tokens a call")


if __name__ == "__main__":
    main()
