"""veRL's SFT data set over `anvil rft`'s output (docs/rft.md): each kept trajectory's token ids as
sampled and rendered, with its loss mask (1 on the model's own tokens), nothing re-tokenized.

In an SFT config (configs/stage2_rft.yaml):

    data:
      custom_cls: {path: pkg://anvil.rl.sft_data, name: TokenSFTDataset}
      train_files: rft.jsonl          # `anvil rft ... --out rft.jsonl` (JSONL or Parquet)
      pad_mode: no_padding            # or right (then max_length pads and truncation applies)

Items are veRL's MultiTurnSFTDataset's: input_ids, position_ids, loss_mask (and attention_mask with
right padding). Rows without token ids (chat-mode trajectories, which `anvil rft` keeps as messages
and counts as no_tokens) are left out, and how many is said; a file with none left, a mask that does
not match its ids, and a sequence over max_length with truncation "error" are refused by file and
row when the set is loaded.
"""
import json
import os

import torch
from torch.utils.data import Dataset


class RftDataError(ValueError):
    pass


def read_rows(path):
    """The rows of one `anvil rft` output file (JSONL, or Parquet with the same columns)."""
    if not os.path.isfile(path):
        raise RftDataError("%s: no such file (data.train_files names it)" % path)
    if path.endswith((".parquet", ".pq")):
        import pyarrow.parquet as pq
        return pq.read_table(path, columns=["id", "input_ids", "loss_mask"]).to_pylist()
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    raise RftDataError("%s:%d: not JSON: %s" % (path, number, e))
    return rows


def checked(row, where):
    """(ids, mask) of a row, None for a chat-mode row (no ids)."""
    ids, mask = row.get("input_ids"), row.get("loss_mask")
    if ids is None:
        return None
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                       for i in ids):
        raise RftDataError("%s (%s): input_ids must be a non-empty list of token ids" % (where, row.get("id")))
    if not isinstance(mask, list) or len(mask) != len(ids) or any(m not in (0, 1) for m in mask):
        raise RftDataError("%s (%s): loss_mask must be one 0 or 1 per input id" % (where, row.get("id")))
    if not any(mask):
        raise RftDataError("%s (%s): loss_mask has no 1: nothing of the model's to learn" % (where, row.get("id")))
    return ids, mask


class TokenSFTDataset(Dataset):
    """veRL's custom SFT data set class: (parquet_files, tokenizer, config, processor, max_samples)."""

    def __init__(self, parquet_files, tokenizer, config, processor=None, max_samples=-1):
        files = [parquet_files] if isinstance(parquet_files, str) else list(parquet_files)
        self.pad_mode = str(config.get("pad_mode", "no_padding"))
        self.max_length = int(config.get("max_length", 1 << 30))
        self.truncation = str(config.get("truncation", "error"))
        self.pad_id = tokenizer.pad_token_id if tokenizer is not None and tokenizer.pad_token_id is not None else 0
        self.items, self.chat_rows = [], 0
        for path in files:
            for i, row in enumerate(read_rows(os.path.expanduser(path))):
                where = "%s row %d" % (path, i)
                pair = checked(row, where)
                if pair is None:
                    self.chat_rows += 1
                    continue
                ids, mask = pair
                if len(ids) > self.max_length and self.truncation == "error":
                    raise RftDataError("%s (%s): %d tokens, over data.max_length %d (truncation: error)"
                                       % (where, row.get("id"), len(ids), self.max_length))
                self.items.append((ids, mask))
        if self.chat_rows:
            print("anvil.rl.sft_data: %d row(s) without token ids left out (chat-mode trajectories: record "
                  "episodes with `anvil agent --tokens` to train on them)" % self.chat_rows)
        if not self.items:
            raise RftDataError("%s: no row has token ids" % ", ".join(files))
        if max_samples is not None and max_samples > 0:
            self.items = self.items[:max_samples]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        ids, mask = self.items[i]
        if len(ids) > self.max_length:
            keep = slice(-self.max_length, None) if self.truncation == "left" else slice(0, self.max_length)
            ids, mask = ids[keep], mask[keep]
        input_ids = torch.tensor(ids, dtype=torch.long)
        loss_mask = torch.tensor(mask, dtype=torch.long)
        if self.pad_mode == "right":
            pad = self.max_length - len(ids)
            attention = torch.cat([torch.ones(len(ids), dtype=torch.long), torch.zeros(pad, dtype=torch.long)])
            return {"input_ids": torch.cat([input_ids, torch.full((pad,), self.pad_id, dtype=torch.long)]),
                    "attention_mask": attention,
                    "position_ids": torch.cat([torch.arange(len(ids)), torch.zeros(pad, dtype=torch.long)]),
                    "loss_mask": torch.cat([loss_mask, torch.zeros(pad, dtype=torch.long)])}
        return {"input_ids": input_ids, "position_ids": torch.arange(len(ids)), "loss_mask": loss_mask}
