"""Loads the traces of a profiled run into HolisticTraceAnalysis (PyPI, made for PyTorch
profiler traces) and prints what it reads: the ranks and events, the box's phase scopes with
their total time, and the most expensive CPU ops. Not part of the tests (HTA is not one of
libkd's dependencies); run it on a folder that //tools:distill --profile_dir wrote:

  python3 -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis
  bazel run -c opt //tools:distill -- --config=tools/configs/fashion_mnist_student.pbtxt \\
      --profile_dir=/tmp/prof
  /tmp/hta/bin/python profiler/hta_report.py /tmp/prof/fashion_mnist_student
"""
import sys

from hta.trace_analysis import TraceAnalysis


def main():
    analysis = TraceAnalysis(trace_dir=sys.argv[1])
    trace = analysis.t
    ranks = trace.get_ranks()
    print("HTA loaded ranks", ranks)
    for rank in ranks:
        df = trace.get_trace(rank)
        symbols = trace.symbol_table.get_sym_table()
        df = df.assign(op=df["name"].map(lambda i: symbols[i]))
        print("rank %d: %d events" % (rank, len(df)))
        phases = ["data", "teacher_forward", "student_forward", "loss", "backward",
                  "optimizer_step", "eval"]
        per_phase = df[df["op"].isin(phases)].groupby("op")["dur"].agg(["count", "sum"])
        print("box phases (count, total us):")
        print(per_phase.to_string())
        ops = df[df["op"].str.startswith("aten::")].groupby("op")["dur"].sum()
        print("top CPU ops by total us:")
        print(ops.sort_values(ascending=False).head(8).to_string())


if __name__ == "__main__":
    main()
