"""Times torchdistill's own DistillationBox on box_benchmark's run: teacher fashion_cnn width 16,
student fashion_cnn width 4 (the same layers as libkd's native model, distill/models/
small_models.cc), synthetic 1x28x28 images of 10 classes, KDLoss (T 4, alpha 0.5), SGD (lr 0.05,
momentum 0.9), one thread. Serves requests, one a line on stdin:

  params                 -> "params TEACHER STUDENT" (parameter counts)
  epoch SAMPLES BATCH    -> "epoch SECONDS LOADER_SECONDS": a fresh box (built outside the
                            timing) trains one epoch of SAMPLES // BATCH batches the way
                            torchdistill's example script does (pre_epoch_process, then per
                            batch forward_process and post_forward_process, post_epoch_process);
                            LOADER_SECONDS is the part spent fetching batches from its loader.
  fmnist SAMPLES BATCH EPOCHS THREADS
                         -> "fmnist SECONDS LOADER_SECONDS": the same on Fashion-MNIST's first
                            SAMPLES training images (Debian's files), normalised and flipped at
                            random as the main job's (torchvision's RandomHorizontalFlip and
                            Normalize), EPOCHS epochs, THREADS intra-op threads.

  python peer_box_timing.py      (run by //distill/boxes:box_benchmark --peers)
  python peer_box_timing.py --save_teacher=FILE
                                 (writes the teacher, scripted, for box_benchmark --teacher=FILE)
"""
import gzip
import logging
import os
import sys
import time

import torch
from torch.utils.data import Dataset, RandomSampler, TensorDataset
from torchvision import transforms
from torchdistill.core.distillation import get_distillation_box

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from distill.models.fashion_cnn import NUM_CLASSES, FashionCnn  # noqa: E402 (the repo's root)


def num_params(model):
    return sum(p.numel() for p in model.parameters())


def synthetic(samples, seed=0, noise=0.5):
    """libkd's "synthetic" dataset: class prototypes plus Gaussian noise."""
    generator = torch.Generator().manual_seed(seed)
    prototypes = torch.randn(NUM_CLASSES, 1, 28, 28, generator=generator)
    targets = torch.arange(samples) % NUM_CLASSES
    images = prototypes[targets] + noise * torch.randn(samples, 1, 28, 28, generator=generator)
    return TensorDataset(images, targets)


class FashionMnist(Dataset):
    """Fashion-MNIST's first `samples` training images from Debian's dataset-fashion-mnist, as
    the main job reads them: scaled to [0, 1], flipped at random, normalised."""

    def __init__(self, samples, root='/usr/share/datasets/fashion-mnist'):
        def idx(name, offset):
            with gzip.open(os.path.join(root, name)) as f:
                return torch.frombuffer(bytearray(f.read()[offset:]), dtype=torch.uint8)
        self.images = idx('train-images-idx3-ubyte.gz', 16).view(-1, 1, 28, 28)[:samples]
        self.targets = idx('train-labels-idx1-ubyte.gz', 8).long()[:samples]
        self.transform = transforms.Compose([transforms.RandomHorizontalFlip(),
                                             transforms.Normalize((0.2860,), (0.3530,))])

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        return self.transform(self.images[i].float() / 255), self.targets[i]


def train_config(batch_size, epochs=1):
    return {
        'num_epochs': epochs,
        'train_data_loader': {
            'dataset_id': 'train',
            'sampler': {'class_or_func': RandomSampler, 'kwargs': {}},
            'kwargs': {'batch_size': batch_size, 'num_workers': 0, 'drop_last': True},
        },
        # libkd's defaults, written out: torchdistill 1.1.5's get_forward_proc_func raises for a
        # missing forward_proc (core/interfaces/registry.py:252), and without requires_grad
        # False its box trains the teacher too (core/distillation.py:196-197). libkd's teacher
        # is frozen: forward under no-grad, not in the optimizer.
        'teacher': {'forward_proc': 'forward_batch_only', 'requires_grad': False},
        'student': {'forward_proc': 'forward_batch_only'},
        'optimizer': {'key': 'SGD', 'kwargs': {'lr': 0.05, 'momentum': 0.9}},
        'criterion': {
            'key': 'WeightedSumLoss',
            'kwargs': {'sub_terms': {'kd': {
                'criterion': {'key': 'KDLoss', 'kwargs': {
                    'student_module_path': '.', 'student_module_io': 'output',
                    'teacher_module_path': '.', 'teacher_module_io': 'output',
                    'temperature': 4.0, 'alpha': 0.5}},
                'weight': 1.0}}},
        },
    }


def make_box(dataset, batch_size, epochs=1):
    torch.manual_seed(1)
    teacher, student = FashionCnn(16), FashionCnn(4)
    # torchdistill's default pre-epoch process sets only the student's mode; its example script
    # leaves the teacher in eval mode (it evaluates the teacher before training). libkd's sets
    # the teacher to eval mode.
    teacher.eval()
    return get_distillation_box(teacher, student, {'train': dataset},
                                train_config(batch_size, epochs), torch.device('cpu'), None,
                                False, 1)


def run_seconds(dataset, batch_size, epochs=1):
    box = make_box(dataset, batch_size, epochs)
    loader_seconds = 0.0
    start = time.perf_counter()
    for epoch in range(epochs):
        box.pre_epoch_process(epoch=epoch)
        batches = iter(box.train_data_loader)
        while True:
            fetch = time.perf_counter()
            try:
                sample_batch, targets, supp_dict = next(batches)
            except StopIteration:
                break
            loader_seconds += time.perf_counter() - fetch
            loss = box.forward_process(sample_batch, targets, supp_dict)
            box.post_forward_process(loss)
        box.post_epoch_process()
    return time.perf_counter() - start, loader_seconds


def main():
    for arg in sys.argv[1:]:
        if arg.startswith('--save_teacher='):
            torch.jit.script(FashionCnn(16).eval()).save(arg.split('=', 1)[1])
            return
    torch.set_num_threads(1)
    # Answers go to the real stdout; anything torchdistill prints or logs goes to stderr.
    answers = sys.stdout
    sys.stdout = sys.stderr
    logging.disable(logging.WARNING)
    for line in sys.stdin:
        words = line.split()
        if words == ['params']:
            print('params', num_params(FashionCnn(16)), num_params(FashionCnn(4)), file=answers,
                  flush=True)
        elif len(words) == 3 and words[0] == 'epoch':
            seconds, loader = run_seconds(synthetic(int(words[1])), int(words[2]))
            print('epoch', seconds, loader, file=answers, flush=True)
        elif len(words) == 5 and words[0] == 'fmnist':
            samples, batch, epochs, threads = (int(w) for w in words[1:])
            torch.set_num_threads(threads)
            seconds, loader = run_seconds(FashionMnist(samples), batch, epochs)
            print('fmnist', seconds, loader, file=answers, flush=True)
        else:
            print('error', file=answers, flush=True)


if __name__ == '__main__':
    main()
