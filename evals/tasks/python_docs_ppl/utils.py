import math
import re
from pathlib import Path

from evals.registry import local_test_split

HERE = Path(__file__).resolve().parent


def load_dataset(**kwargs):
    return local_test_split(HERE)


def words(text: str) -> int:
    return len(re.split(r"\s+", text.strip()))


def process_results(doc, results):
    """results: [the document's summed log-likelihood in nats]."""
    (loglikelihood,) = results
    n_bytes = len(doc["text"].encode("utf-8"))
    return {"doc_bits_per_byte": -loglikelihood / (n_bytes * math.log(2)),
            "word_perplexity": (loglikelihood, words(doc["text"])),
            "bits_per_byte": (loglikelihood, n_bytes)}
