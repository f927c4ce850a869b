"""Train a small MLP on a table: read, downcast, split, fit a recipe on train, train with embeddings.

    python examples/train_tabular.py                                   # generated transactions table
    python examples/train_tabular.py --data diamonds.csv --target price --task regression
    python examples/train_tabular.py --data diamonds.csv --target cut  # 5 grades, as text
    python examples/train_tabular.py --data flights.csv --target arr_delay --above 15 --drop arr_time,air_time
    python examples/train_tabular.py --backend pandas --device cpu --epochs 1 --rows 500

The story: read any table read_table takes (CSV, Parquet, Feather, JSON, ...) on cuDF, polars
or pandas; shrink its dtypes losslessly (downcast); split it by time when it has a datetime
column (else at random); fit a Recipe on the training split only (fill, clip, log of skewed
non-negative columns, standardise, Categorify text, HashBucket high-cardinality ids; a text
target LabelEncode'd to classes 0..K-1, a regression target standardised), save it, and
transform the validation split with the recipe loaded back from the file, as serving would.
The frames go to torch with iter_batches: float features, int64 codes (categorical=) and the
label (float32 for regression); the MLP embeds each encoded column, sized by
recipe.num_embeddings, and the RMSE is reported in the target's units through recipe.inverse.
On the transactions table the label is 1 for ~12% of rows at most amounts, so accuracy stays at
predicting 0 (0.88); the loss is what the model learns. Ends with one line of metrics (loss, accuracy or RMSE) and the rows/s of the data path
(iter_batches) against the training step. The same flags give the same numbers on every
backend (up to float noise).
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import narwhals as nw
import torch
from torch import nn

from gpufeed.backends import choose_dataframe_backend, resolve_device
from gpufeed.datasets.tables import read_table
from gpufeed.datasets.transactions import write_transaction_table
from gpufeed.gpu_transforms.tabular import (
    Categorify,
    Clip,
    FillMissing,
    HashBucket,
    LabelEncode,
    Log,
    Recipe,
    Rule,
    Standardize,
    TabularError,
    apply_rules,
    col,
    downcast,
    split_by_time,
    split_random,
)
from gpufeed.pipelines.tables import iter_batches

#: Column dtypes taken as labels or text: Categorify/HashBucket features, a LabelEncode'd target.
TEXT_DTYPES = (nw.String, nw.Categorical, nw.Enum, nw.Boolean)
IGNORE = -100  # cross_entropy's ignore_index: no row here carries it, but it is the default iter_batches allows


def plan(train: Any, target: str, task: str, time_column: str | None, max_categories: int,
         buckets: int) -> tuple[Recipe, list[str], list[str], dict[str, str]]:
    """Which columns become what, decided on the training split only (what the recipe fits on).

    Returns (recipe, numeric columns, encoded columns, left-out columns with why)."""
    frame = nw.from_native(train, eager_only=True)
    rows = len(frame)
    numeric, text, left_out = [], [], {}
    for name, dtype in frame.schema.items():
        if name in (target, time_column):
            continue
        if dtype.is_numeric() and not isinstance(dtype, nw.Decimal):
            distinct = frame[name].n_unique()
            # A row number (transaction_id, R's row names): distinct integers in row order. Not
            # any column of distinct integers: prices in cents and epoch seconds are that too.
            if dtype.is_integer() and distinct == rows and rows > 1 and frame[name].is_sorted():
                left_out[name] = "a row id"
            elif distinct > 1:
                numeric.append(name)
            else:
                left_out[name] = "constant"
        elif dtype in TEXT_DTYPES:
            text.append(name)
        else:
            left_out[name] = str(dtype)
    # Few distinct values: a vocabulary (Categorify); many (customer ids): hashed buckets,
    # whose vocabulary would not fit and keeps growing in serving.
    many = {c for c in text if frame[c].n_unique() > max_categories}
    skewed = []
    for c in numeric:  # log1p where the values are >= 0 and the tail is long (amounts, counts)
        values = frame[c].drop_nulls().cast(nw.Float64)
        low, mid, high = values.min(), values.quantile(0.5, "nearest"), values.max()
        if low is not None and low >= 0 and high > 10 * max(mid, 1e-12) and high > 10:
            skewed.append(c)
    ops = [FillMissing(numeric), Clip(numeric, quantiles=(0.001, 0.999))] if numeric else []
    ops += [Log(skewed)] if skewed else []
    ops += [Standardize(numeric)] if numeric else []
    ops += [Categorify(sorted(set(text) - many))] if set(text) - many else []
    ops += [HashBucket(sorted(many), buckets=buckets)] if many else []
    if task == "regression":
        ops.append(Standardize([target]))  # trained on z-scores; recipe.inverse gives the target's units back
    elif frame.schema[target] in TEXT_DTYPES:
        ops.append(LabelEncode([target]))  # classes 0..K-1 (a class not seen in training is an error)
    if not numeric and not text:
        raise ValueError(f"no feature columns besides the target {target!r}")
    encoded = sorted(set(text) - many) + sorted(many)
    return Recipe(ops), numeric, encoded, left_out


class TabularMLP(nn.Module):
    """Numeric features next to one embedding per encoded column, then an MLP."""

    def __init__(self, numeric: int, sizes: list[int], outputs: int, hidden: int = 128) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, min(16, (n + 1) // 2)) for n in sizes)
        width = numeric + sum(e.embedding_dim for e in self.embeddings)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, outputs))
        self.numeric = numeric

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> torch.Tensor:
        # x_num: float32 (rows, numeric); x_cat: int64 codes (rows, encoded), one column per embedding
        parts = [x_num, *(e(x_cat[:, i]) for i, e in enumerate(self.embeddings))]
        return self.mlp(torch.cat(parts, dim=1))


def run_epoch(model: nn.Module, frame: Any, numeric: list[str], encoded: list[str], label: str,
              args: argparse.Namespace, device: torch.device, recipe: Recipe, *, train: bool, epoch: int,
              opt: torch.optim.Optimizer | None = None,
              num_classes: int | None = None) -> tuple[float, float, int, float, float]:
    """One pass over ``frame``; returns (loss, accuracy or RMSE, rows, data seconds, step seconds)."""
    regression = args.task == "regression"
    # iter_batches, not to_tensors: it converts a chunk of batches at a time, so a table larger
    # than the device's memory trains the same way, and shuffle=True draws rows from the whole
    # table in a new seeded order each epoch (a table split by time is sorted by time). On
    # the CPU it outruns to_tensors once plus a randperm gather; on flights (2-core CPU) it
    # moves 5.0M rows/s on polars, 8.5M on pandas, ~10x the training step.
    batches = iter_batches(frame, numeric, label, categorical=encoded, batch_size=args.batch_size, device=device,
                           shuffle=train, seed=args.seed, epoch=epoch, num_classes=num_classes,
                           label_dtype=torch.float32 if regression else torch.int64)
    model.train(train)
    total = hits = squares = rows = 0.0
    data_s = step_s = 0.0
    while True:
        t0 = time.perf_counter()
        batch = next(batches, None)
        t1 = time.perf_counter()
        if batch is None:
            break
        x_num, x_cat, y = batch
        with torch.set_grad_enabled(train):
            out = model(x_num, x_cat)
            loss = (nn.functional.mse_loss(out.squeeze(1), y) if regression
                    else nn.functional.cross_entropy(out, y, ignore_index=IGNORE))
            if train:
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        n = len(y)
        total += loss.item() * n  # .item() waits for the GPU: the step time is the step's own
        if regression:  # errors in the target's units: the recipe's Standardize undone
            pred = recipe.inverse(label, out.detach().squeeze(1))
            squares += ((pred - recipe.inverse(label, y)) ** 2).sum().item()
        else:
            hits += (out.argmax(1) == y).sum().item()
        rows += n
        data_s += t1 - t0
        step_s += time.perf_counter() - t1
    if not rows:
        raise ValueError(f"the {'training' if train else 'validation'} split has no rows")
    loss = total / rows
    metric = math.sqrt(squares / rows) if regression else hits / rows
    return loss, metric, int(rows), data_s, step_s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="a table read_table reads (CSV, Parquet, Feather, JSON, ...); "
                                  "default: the generated transactions table (gpufeed data transactions)")
    p.add_argument("--rows", type=int, default=20_000, help="rows of the generated table (default 20000)")
    p.add_argument("--target", default="label", help="column to predict (default: label, the transactions "
                                                     "table's fraud-like 0/1)")
    p.add_argument("--task", choices=("classification", "regression"), default="classification")
    p.add_argument("--above", type=float, default=None,
                   help="classify TARGET > ABOVE (e.g. --target arr_delay --above 15) instead of its values")
    p.add_argument("--drop", default="", help="comma-separated columns to leave out (known only after the "
                                             "target: flights' arr_time, air_time)")
    p.add_argument("--split", choices=("auto", "time", "random"), default="auto",
                   help="auto: by time when the table has a datetime column, else random (80/20)")
    p.add_argument("--backend", choices=("auto", "cudf", "polars", "pandas"), default="auto")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    p.add_argument("--max-categories", type=int, default=1000,
                   help="text columns with more distinct values are hashed (HashBucket) instead of Categorify")
    p.add_argument("--buckets", type=int, default=1024, help="HashBucket buckets")
    p.add_argument("--recipe-out", default="gpufeed-results/tabular_recipe.json",
                   help="where the fitted recipe is saved (its folder is made if missing; default: beside the "
                        "benchmarks' results, a folder git ignores)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for option, value, low in (("--rows", args.rows, 10), ("--epochs", args.epochs, 1),
                               ("--batch-size", args.batch_size, 1), ("--max-categories", args.max_categories, 1),
                               ("--buckets", args.buckets, 2), ("--seed", args.seed, 0)):
        if value < low:
            p.error(f"{option} must be >= {low}, got {value}")
    if not args.lr > 0:
        p.error(f"--lr must be > 0, got {args.lr}")
    try:
        Path(args.recipe_out).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file where the folder should be, no permission
        p.error(f"--recipe-out {args.recipe_out}: cannot make its folder {Path(args.recipe_out).parent}: {exc}")
    if args.above is not None and args.task == "regression":
        p.error("--above makes a classification target: leave out --task regression")
    try:
        device = resolve_device(args.device)
        choice = choose_dataframe_backend(args.backend)
    except (RuntimeError, ValueError) as exc:
        p.error(str(exc))
    torch.manual_seed(args.seed)

    # 1. Read. Default: the kit's transactions table, written as `gpufeed data transactions` does.
    if args.data is None:
        scratch = tempfile.TemporaryDirectory(prefix="gpufeed-example-")
        args.data = str(write_transaction_table(Path(scratch.name) / "transactions.parquet", args.rows))
    try:
        df = read_table(args.data, backend=choice.name)
    except (OSError, TabularError, ValueError) as exc:
        p.error(str(exc))
    frame = nw.from_native(df, eager_only=True)
    if args.target not in frame.columns:
        p.error(f"--target {args.target!r} is not a column of {args.data}: {', '.join(frame.columns)}")
    print(f"table: {args.data}, {len(frame)} rows x {len(frame.columns)} columns on {choice.name} ({choice.reason})")

    # Rows without a target teach nothing (flights cancelled before landing have no arr_delay).
    target = frame[args.target]
    missing = target.is_null() | (target.is_nan() if target.dtype.is_float() else False)
    if missing.any():
        print(f"dropped {int(missing.sum())} rows without {args.target}")
        frame = frame.filter(~missing)
    dropped = [c for c in args.drop.split(",") if c]
    if unknown := [c for c in dropped if c not in frame.columns or c == args.target]:
        p.error(f"--drop {','.join(unknown)}: not a column of {args.data} other than the target")
    frame = frame.drop(dropped)
    label = args.target
    if args.above is not None:  # a new 0/1 column from a declarative rule, vectorised on every backend
        label = f"{args.target}_above_{args.above:g}"
        try:
            frame = nw.from_native(apply_rules(frame.to_native(), [Rule(label, [(col(args.target) > args.above, 1)],
                                                                        default=0)]), eager_only=True)
        except TabularError as exc:
            p.error(str(exc))
        frame = frame.drop(args.target)  # the model must not see what the label is made of

    # 2. Downcast (lossless), split, fit on train, save, reload, transform val.
    small, report = downcast(frame.to_native())
    print(f"downcast: {report.saved_fraction:.0%} less memory")
    times = [c for c, t in nw.from_native(small).schema.items() if t in (nw.Datetime, nw.Date) and c != label]
    if args.split == "time" and not times:
        p.error(f"--split time needs a datetime column; {args.data} has none")
    time_column = times[0] if times and args.split != "random" else None
    split = (split_by_time(small, time_column, (0.8, 0.2)) if time_column
             else split_random(small, (0.8, 0.2), seed=args.seed))
    print(split.report())
    for part in ("train", "val"):  # the split only warned; fitting on nothing failed far from here
        if len(getattr(split, part)) == 0:
            hint = (f"the {time_column!r} values repeat too much for an 80/20 split by time: pass --split random"
                    if time_column else "the table has too few rows")
            p.error(f"the {part} split has no row ({len(small)} rows in {args.data}): {hint}")
    schema = nw.from_native(split.train).schema
    if args.task == "classification" and not (schema[label].is_integer() or schema[label] in TEXT_DTYPES):
        p.error(f"--target {label!r} holds {schema[label]}, not classes: pass --task regression, or --above X")
    try:
        recipe, numeric, encoded, left_out = plan(split.train, label, args.task, time_column,
                                                  args.max_categories, args.buckets)
        recipe.fit(split.train)
        recipe.save(args.recipe_out)
        recipe = Recipe.load(args.recipe_out)  # what a serving process does: the file, not the object
        train, val = recipe.transform(split.train), recipe.transform(split.val)
    except (TabularError, ValueError, OSError) as exc:
        p.error(str(exc))
    if left_out:
        print("left out: " + ", ".join(f"{c} ({why})" for c, why in left_out.items()))
    sizes = [recipe.num_embeddings(c) for c in encoded]  # Categorify: vocabulary + 2; HashBucket: buckets
    print(f"recipe: {len(recipe.ops)} ops ({', '.join(op.kind for op in recipe.ops)}) saved to {Path(args.recipe_out).resolve()}; "
          f"{len(numeric)} numeric, {len(encoded)} embedded ({', '.join(f'{c}:{n}' for c, n in zip(encoded, sizes, strict=True))})")

    # 3. Train.
    regression = args.task == "regression"
    if regression:
        outputs = 1
    elif any(isinstance(op, LabelEncode) and label in op.columns for op in recipe.ops):
        outputs = recipe.num_classes(label)  # classes 0..K-1
    else:
        low, high = nw.from_native(train)[label].min(), nw.from_native(train)[label].max()
        if low < 0:
            p.error(f"--target {label!r} holds negative values ({low}): not class indices")
        outputs = int(high) + 1
        if outputs > max(len(train), args.max_categories):  # Salaries' salary: 231,546 outputs for 318 rows
            p.error(f"--target {label!r} holds integers up to {high}: {outputs} classes for {len(train)} training "
                    "rows, not classes: pass --task regression, or --above X")
    model = TabularMLP(len(numeric), sizes, outputs).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    what = "rmse" if regression else "acc"
    print(f"training on {device}: {len(numeric) + len(encoded)} features, {outputs} outputs, "
          f"batch {args.batch_size}, {args.epochs} epochs")
    for epoch in range(args.epochs):
        tr_loss, tr_metric, rows, data_s, step_s = run_epoch(model, train, numeric, encoded, label, args, device,
                                                             recipe, train=True, epoch=epoch, opt=opt,
                                                             num_classes=None if regression else outputs)
        va_loss, va_metric, *_ = run_epoch(model, val, numeric, encoded, label, args, device, recipe, train=False,
                                           epoch=0, num_classes=None if regression else outputs)
        print(f"epoch {epoch + 1}/{args.epochs}  train loss {tr_loss:.4f} {what} {tr_metric:.4f}  "
              f"val loss {va_loss:.4f} {what} {va_metric:.4f}  "
              f"data {rows / max(data_s, 1e-9):,.0f} rows/s, step {rows / max(step_s, 1e-9):,.0f} rows/s")
    print(f"metrics: train_loss={tr_loss:.4f} train_{what}={tr_metric:.4f} val_loss={va_loss:.4f} "
          f"val_{what}={va_metric:.4f} data_rows_per_s={rows / max(data_s, 1e-9):.0f} "
          f"step_rows_per_s={rows / max(step_s, 1e-9):.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
