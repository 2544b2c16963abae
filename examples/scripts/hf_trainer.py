"""Fine-tune a small GPT-2 (built from a config: no download) with the Hugging Face Trainer.

The loop is the Trainer's, never seen by the user: perflab finds the steps from the
optimizer hook inside it. Synthetic token data; no known bottleneck by construction —
a check that an unseen loop is attached, stepped and judged.
"""
import argparse

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class RandomTokens(Dataset):
    def __init__(self, n, length, vocab):
        self.n, self.length, self.vocab = n, length, vocab

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, self.vocab, (self.length,), generator=g)
        return {"input_ids": ids, "labels": ids.clone()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-steps", type=int, default=2000)
    p.add_argument("--output-dir", default="hf_trainer_out")
    args = p.parse_args()

    config = GPT2Config(n_layer=args.layers, n_head=4, n_embd=256, vocab_size=8192,
                        n_positions=args.seq)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(output_dir=args.output_dir, per_device_train_batch_size=
                                 args.batch_size, max_steps=args.max_steps, logging_steps=50,
                                 save_strategy="no", report_to=[], learning_rate=3e-4,
                                 dataloader_num_workers=0,
                                 bf16=torch.cuda.is_available())
    trainer = Trainer(model=model, args=training,
                      train_dataset=RandomTokens(100_000, args.seq, config.vocab_size))
    trainer.train()


if __name__ == "__main__":
    main()
