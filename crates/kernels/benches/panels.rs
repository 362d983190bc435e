//! The prefill matmul on each path this CPU runs, on SmolLM2-135M's shapes with random Q4_1
//! weights and 256 activation rows: the f32 GEMM over expanded blocks (the `avx2` path,
//! candle's gemm), the int8 panels on AVX-512 VNNI, and on AMX tiles; G multiply-adds/s
//! beside each path's peak on every core (`peak.rs`). Runs without model files, so it can
//! be copied to a machine that has AMX.
//!
//! `cargo bench -p tabcontam-kernels --bench panels`.

use std::time::Instant;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use tabcontam_kernels::cpu::Isa;
use tabcontam_kernels::q4_1::{Activations, dequantize};
use tabcontam_kernels::vnni::{self, Blocks};

fn seconds_per_call(mut call: impl FnMut()) -> f64 {
    call();
    let started = Instant::now();
    let mut calls = 0;
    while started.elapsed().as_secs_f64() < 1.0 {
        call();
        calls += 1;
    }
    started.elapsed().as_secs_f64() / f64::from(calls)
}

/// Q4_1 blocks of an `n × k` weight of standard normal values.
fn random_q4_1(n: usize, k: usize) -> Vec<u8> {
    let weight = Tensor::randn(0f32, 1.0, (n, k), &Device::Cpu).unwrap();
    QTensor::quantize(&weight, GgmlDType::Q4_1)
        .unwrap()
        .data()
        .unwrap()
        .to_vec()
}

fn main() {
    let best = tabcontam_kernels::cpu::detected();
    println!(
        "{} threads; best path {}; peaks on every core at once: {}",
        rayon::current_num_threads(),
        best.name(),
        Isa::runnable()
            .into_iter()
            .filter(|&isa| isa >= Isa::Avx2)
            .map(|isa| format!(
                "{} {:.0} G MAC/s",
                isa.name(),
                tabcontam_kernels::peak::on_every_core(isa) / 1e9
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (rows, n, k) in [
        (256usize, 1536usize, 576usize),
        (256, 576, 1536),
        (256, 576, 576),
    ] {
        let data = random_q4_1(n, k);
        let x = Tensor::randn(0f32, 1.0, (rows, k), &Device::Cpu).unwrap();
        let lhs = x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let macs = (rows * n * k) as f64;
        let mut line = format!("rows {rows} × ({n} × {k}):");
        let gemm = seconds_per_call(|| {
            let dense = Tensor::from_vec(dequantize(&data, n, k), (n, k), &Device::Cpu).unwrap();
            let _ = x.matmul(&dense.t().unwrap()).unwrap();
        });
        line += &format!(" f32 GEMM {:.0} G/s", macs / gemm / 1e9);
        if vnni::available() {
            for amx in [false, true] {
                if amx && !tabcontam_kernels::cpu::amx_usable() {
                    continue;
                }
                let seconds = seconds_per_call(|| {
                    let xs = Activations::quantize(&lhs, k);
                    let _ = vnni::matmul_with(amx, Blocks::Q4_1, &data, n, k, &xs, rows);
                });
                line += &format!(
                    ", {} {:.0} G/s ({:.2}x)",
                    if amx { "amx" } else { "avx512" },
                    macs / seconds / 1e9,
                    gemm / seconds
                );
            }
            // The kernel alone, as a prefill runs it: weights laid out once, activations
            // quantized once.
            let laid_out = vnni::LaidOut::new(Blocks::Q4_1, &data, n, k);
            let xs = Activations::quantize(&lhs, k);
            let seconds = seconds_per_call(|| {
                let _ = laid_out.matmul_with(false, &xs, rows);
            });
            line += &format!(", laid out {:.0} G/s", macs / seconds / 1e9);
        }
        println!("{line}");
    }
    if vnni::available() {
        decoding_steps();
    }
}

/// A decoding step's products: 1 row, then 6 (a batch of 8 with two finished), through
/// every weight of SmolLM2-135M's 30 layers, far more than the caches hold, on one thread as
/// a lane runs them; the codes laid out as bytes and packed two to a byte, each without and
/// with the next tile asked for while one is multiplied (`LaidOut::matmul_unprefetched`
/// against `matmul_with`), side by side. What the step waits for is the weights' bytes, so
/// the G/s of memory read is printed beside the multiply-adds.
fn decoding_steps() {
    let shapes = [
        (576usize, 576usize),
        (192, 576),
        (192, 576),
        (576, 576),
        (1536, 576),
        (1536, 576),
        (576, 1536),
    ];
    let weights: Vec<(usize, usize, Vec<u8>)> = (0..30)
        .flat_map(|_| shapes)
        .map(|(n, k)| (n, k, random_q4_1(n, k)))
        .collect();
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    for packed in [false, true] {
        let laid_out: Vec<vnni::LaidOut> = weights
            .iter()
            .map(|(n, k, data)| vnni::LaidOut::with_packing(Blocks::Q4_1, data, *n, *k, packed))
            .collect();
        let bytes: f64 = weights
            .iter()
            .map(|(n, k, _)| (n * k) as f64 * if packed { 0.75 } else { 1.25 })
            .sum();
        for rows in [1usize, 6] {
            let macs: f64 = weights.iter().map(|(n, k, _)| (rows * n * k) as f64).sum();
            let inputs: Vec<Activations> = weights
                .iter()
                .map(|(_, k, _)| Activations::quantize(&vec![0.5f32; rows * k], *k))
                .collect();
            let mut line = format!(
                "decoding step, {rows} row{} × 30 layers, 1 thread, {}:",
                if rows == 1 { "" } else { "s" },
                if packed { "packed" } else { "bytes" }
            );
            let mut without = 0.0;
            for ahead in [false, true] {
                let seconds = one_thread.install(|| {
                    seconds_per_call(|| {
                        for (weight, xs) in laid_out.iter().zip(&inputs) {
                            let _ = if ahead {
                                weight.matmul_with(false, xs, rows)
                            } else {
                                weight.matmul_unprefetched(false, xs, rows)
                            };
                        }
                    })
                });
                line += &format!(
                    " {} {:.2} ms ({:.0} G MAC/s, {:.1} GB/s of weights)",
                    if ahead {
                        "next tile asked for"
                    } else {
                        "tile by tile"
                    },
                    seconds * 1e3,
                    macs / seconds / 1e9,
                    bytes / seconds / 1e9
                );
                if ahead {
                    line += &format!(" ({:.2}x)", without / seconds);
                }
                without = seconds;
            }
            println!("{line}");
        }
    }
}
