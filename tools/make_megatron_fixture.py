"""Writes the Megatron-LM indexed-dataset fixtures of tests/fixtures/megatron/ with Megatron-Core's
own writer (IndexedDatasetBuilder), and the tokens every document must read back as.

Pinned: megatron-core==0.16.1, torch==2.15.0, numpy==2.4.6 (in /work/venv-tools).
Run: /work/venv-tools/bin/python tools/make_megatron_fixture.py

Each corpus has 20 documents of 1 to 3 sequences ("sentences", as preprocess_data.py
--split-sentences writes them) of random lengths. corpus_u16 stores uint16 tokens (dtype code 8),
corpus_i32 int32 tokens (code 4). expected.json holds, per corpus, the dtype code, the sequence
lengths, the document indices and every document's tokens, read back through Megatron-Core's
IndexedDataset.
"""
import json
import os

import numpy
import torch
from megatron.core.datasets.indexed_dataset import DType, IndexedDataset, IndexedDatasetBuilder

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                       "megatron")
NUM_DOCUMENTS = 20
VOCAB_SIZE = 1000


def write_corpus(prefix, dtype, seed):
    rng = numpy.random.default_rng(seed)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    for _ in range(NUM_DOCUMENTS):
        for _ in range(int(rng.integers(1, 4))):
            length = int(rng.integers(1, 40))
            builder.add_item(torch.from_numpy(rng.integers(0, VOCAB_SIZE, size=length)))
        builder.end_document()
    builder.finalize(prefix + ".idx")


def read_back(prefix):
    dataset = IndexedDataset(prefix)
    documents = []
    for d in range(len(dataset.document_indices) - 1):
        first, last = dataset.document_indices[d], dataset.document_indices[d + 1]
        tokens = [int(t) for s in range(first, last) for t in dataset[s]]
        documents.append(tokens)
    return {
        "dtype_code": DType.code_from_dtype(dataset.index.dtype),
        "sequence_lengths": [int(n) for n in dataset.sequence_lengths],
        "document_indices": [int(i) for i in dataset.document_indices],
        "documents": documents,
    }


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    expected = {"vocab_size": VOCAB_SIZE}
    for name, dtype, seed in [("corpus_u16", numpy.uint16, 1), ("corpus_i32", numpy.int32, 2)]:
        prefix = os.path.join(OUT_DIR, name)
        write_corpus(prefix, dtype, seed)
        expected[name] = read_back(prefix)
    with open(os.path.join(OUT_DIR, "expected.json"), "w") as f:
        json.dump(expected, f)
        f.write("\n")


if __name__ == "__main__":
    main()
