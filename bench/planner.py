"""The planner of chapter 8.5 against published runs: Narayanan et al. 2021, Table 1 (issues 28, 41),
row by row, Llama 3 405B's Table 4, MT-NLG 530B and BLOOM 176B (issue 35).

Pure arithmetic, no run: every row's published layout priced (memory, teraFLOP/s per GPU) and
ranked among the meshes the planner finds with Megatron-LM 2021's options; the errors beside a
baseline's and the rank correlation; the range of matmul efficiencies over which every row passes;
what the planner picks for each row with today's options (ZeRO, selective or no recomputation,
flash attention, sequence and context parallelism, overlapped reductions), which no run has
checked; and Llama 3's three layouts against the planner's search.

Writes bench/results/planner.md and prints it.

    python bench/planner.py
"""
from __future__ import annotations

import report
from helpers.analysis import planner as analysis
from helpers.theory.planner import a100_runs, llama3, plan, published


def today(row) -> str:
    model, cluster = published.model_of(row), published.selene(row[6])
    best = plan(model, cluster, row[7] * published.SEQ, top=1)[0]
    mine = published.published_layout(row, model, cluster)
    ly = best.layout
    tflops = published.equation_3_flops(model, row[7]) / (row[6] * best.step_s) / 1e12
    return (f"| {row[0]:g}B | d={ly.dp} t={ly.tp} p={ly.pp} cp={ly.cp} | ZeRO-{ly.zero} | {ly.recompute} "
            f"| b={ly.micro_batch} v={ly.virtual} | {best.memory_bytes / published.GiB:.1f} "
            f"| {mine.step_s / best.step_s:.2f} | {tflops:.0f} |")


def main() -> None:
    rows = analysis.narayanan_table()
    room = analysis.passing_efficiencies()
    errors = analysis.table_1_errors(rows)
    lines = [f"Matmuls at {published.MATMUL_EFFICIENCY} and the attention core at {published.ATTENTION_EFFICIENCY} "
             f"of {published.PEAK_FLOPS / 1e12:g} TFLOP/s, fitted on the rows marked so; "
             f"{sum(r.passes for r in rows)} of {len(rows)} rows pass. Largest error {errors['fit_worst']:+.1%} "
             f"fitted on, {errors['held_worst']:+.1%} held out; the published median ({errors['baseline']:g}) "
             f"for every row: {errors['baseline_worst']:+.1%}; Spearman's rho {errors['rho']:.2f}.", "",
             analysis.markdown(rows), "",
             f"Every row passes for matmul efficiencies {min(room):.2f}-{max(room):.2f} (steps of 0.01)." if room
             else "No matmul efficiency in 0.40-0.80 passes every row.", "",
             "| model | today's best mesh | ZeRO | recompute | micro-batch, chunks | memory GiB "
             "| 2021 step / this step | eq. 3 TFLOP/s |", "| --- | --- | --- | --- | --- | --- | --- | --- |",
             *[today(row) for row in published.TABLE_1], "",
             "Llama 3 405B, Dubey et al. 2024, Table 4 (issue 35; `theory.planner.llama3` states what is assumed; "
             "TFLOP/s with the attention core at half, ranked among what its stack offered):",
             "", "| GPUs | (dp, tp, pp, cp) | sequence | published TFLOP/s | predicted | memory GiB | fits | v "
             "| rank | planner's best (dp, tp, pp, cp, ep) | published / best step |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
             *[f"| {r.gpus} | {r.mesh} | {r.seq} | {r.published_tflops:g} | {r.predicted_tflops:.0f} "
               f"| {r.memory_gib:.1f} | {'yes' if r.fits else 'NO'} | {r.virtual} | {r.rank or '-'} | {r.best_mesh} "
               f"| {1 + r.slower_than_best:.3f} |" for r in llama3.compare()], "",
             "MT-NLG 530B (Smith et al. 2022) and BLOOM 176B (BigScience 2022), on A100s (issue 35; "
             "`theory.planner.a100_runs` states what is assumed), TFLOP/s by equation 3:", "",
             "| run | GPUs | (dp, tp, pp, cp) | published TFLOP/s | predicted | error | memory GiB | fits | rank "
             "| planner's best (dp, tp, pp, cp, ep) | published / best step |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
             *[f"| {run[0]} | {r.gpus} | {r.mesh} | {r.published_tflops:g} | {r.predicted_tflops:.0f} "
               f"| {r.predicted_tflops / r.published_tflops - 1:+.1%} | {r.memory_gib:.1f} | {'yes' if r.fits else 'NO'} "
               f"| {r.rank or '-'} | {r.best_mesh} | {1 + r.slower_than_best:.3f} |"
               for run, r in zip(a100_runs.RUNS, a100_runs.compare())]]
    print(report.write("planner", lines))


if __name__ == "__main__":
    main()
