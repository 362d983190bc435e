//! Training's products on bf16 operands ([`tabcontam_kernels::bf16`]) beside candle's f32
//! matmul (the `gemm` crate, as the trainer's f32 mode calls it) on SmolLM2-135M's shapes
//! at a batch of 4 × 256 tokens: the three products of a projection (`x Wᵀ`, `dy W`,
//! `dyᵀ x`), G multiply-adds/s and the ratio, on every core of the pool.
//!
//! `cargo bench -p tabcontam-kernels --bench bf16`.

use std::time::Instant;

use candle_core::{Device, Tensor};
use tabcontam_kernels::bf16::{self, Operand};

fn seconds_per_call(mut call: impl FnMut()) -> f64 {
    call();
    let started = Instant::now();
    let mut calls = 0;
    while started.elapsed().as_secs_f64() < 1.0 || calls < 3 {
        call();
        calls += 1;
    }
    started.elapsed().as_secs_f64() / f64::from(calls)
}

/// A product: its label, `m`, `n`, `k`, `A`, `B`, and candle's f32 product of the same.
type Case<'a> = (
    &'a str,
    usize,
    usize,
    usize,
    Operand,
    Operand,
    Box<dyn Fn() + 'a>,
);

fn values(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7919 % 1000) as f32 / 1000.0) - 0.5)
        .collect()
}

fn main() {
    let threads = rayon::current_num_threads();
    println!(
        "bf16 products on {threads} threads, native vdpbf16ps: {}",
        bf16::native()
    );
    // Each instruction's peak on every core at once (register-only loops, `peak.rs`),
    // each loop timed alone.
    let peak = |loop_: fn() -> Option<f64>| -> Option<f64> {
        std::thread::scope(|scope| {
            let started = Instant::now();
            let workers: Vec<_> = (0..threads).map(|_| scope.spawn(loop_)).collect();
            let done: Option<f64> = workers.into_iter().map(|w| w.join().expect("peak")).sum();
            done.map(|d| d / started.elapsed().as_secs_f64() / 1e9)
        })
    };
    // The best of three: a loop that shares its core with anything else reads low.
    let best = |loop_: fn() -> Option<f64>| (0..3).filter_map(|_| peak(loop_)).reduce(f64::max);
    let f32_peak = best(tabcontam_kernels::peak::f32_512_multiply_adds);
    let bf16_peak = best(tabcontam_kernels::peak::bf16_multiply_adds);
    println!(
        "peaks on {threads} cores (G multiply-adds/s): 512-bit f32 FMA {}, vdpbf16ps {}",
        f32_peak.map_or("-".into(), |p| format!("{p:.1}")),
        bf16_peak.map_or("-".into(), |p| format!("{p:.1}")),
    );
    println!(
        "| product | m × n × k | f32 (candle/gemm) G/s | % of f32 peak | bf16 G/s | % of bf16 peak | ratio |"
    );
    println!("|---|---|---|---|---|---|---|");
    let percent = |rate: f64, peak: Option<f64>| {
        peak.map_or("-".into(), |p| format!("{:.0} %", 100.0 * rate / p))
    };
    let rows = 1024;
    for (name, out, inputs) in [
        ("q (576→576)", 576, 576),
        ("gate/up (576→1536)", 1536, 576),
        ("down (1536→576)", 576, 1536),
    ] {
        let x = values(rows * inputs);
        let w = values(out * inputs);
        let dy = values(rows * out);
        let tensor =
            |v: &[f32], r: usize, c: usize| Tensor::from_slice(v, (r, c), &Device::Cpu).unwrap();
        let (xt, wt, dyt) = (
            tensor(&x, rows, inputs),
            tensor(&w, out, inputs),
            tensor(&dy, rows, out),
        );
        let dense = |ptr: &[f32], cols: usize| Operand {
            ptr: ptr.as_ptr(),
            row_stride: cols as isize,
            col_stride: 1,
        };
        let transposed = |ptr: &[f32], rows: usize| Operand {
            ptr: ptr.as_ptr(),
            row_stride: 1,
            col_stride: rows as isize,
        };
        let cases: [Case; 3] = [
            (
                "x Wᵀ",
                rows,
                out,
                inputs,
                dense(&x, inputs),
                transposed(&w, inputs),
                Box::new(|| {
                    xt.matmul(&wt.t().unwrap()).unwrap();
                }),
            ),
            (
                "dy W",
                rows,
                inputs,
                out,
                dense(&dy, out),
                dense(&w, inputs),
                Box::new(|| {
                    dyt.matmul(&wt).unwrap();
                }),
            ),
            (
                "dyᵀ x",
                out,
                inputs,
                rows,
                transposed(&dy, out),
                dense(&x, inputs),
                Box::new(|| {
                    dyt.t().unwrap().matmul(&xt).unwrap();
                }),
            ),
        ];
        for (label, m, n, k, a, b, reference) in cases {
            let mut dst = vec![0f32; m * n];
            let work = (m * n * k) as f64 / 1e9;
            let f32_time = seconds_per_call(reference);
            // SAFETY: `dst` is `m × n`, the operands hold their values at their strides.
            let bf16_time = seconds_per_call(|| unsafe {
                bf16::gemm(
                    m,
                    n,
                    k,
                    dst.as_mut_ptr(),
                    n as isize,
                    false,
                    1.0,
                    a,
                    b,
                    threads,
                )
            });
            println!(
                "| {name} {label} | {m} × {n} × {k} | {:.1} | {} | {:.1} | {} | {:.2}× |",
                work / f32_time,
                percent(work / f32_time, f32_peak),
                work / bf16_time,
                percent(work / bf16_time, bf16_peak),
                f32_time / bf16_time
            );
        }
    }
}
