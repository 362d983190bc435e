//! The trainer's linear op against candle's matmul and its gradients, in f32 bit for bit
//! and in bf16 against the rounded operands' products.
use super::*;
use candle_core::{DType, Device};

/// A seeded `shape` tensor of values in [-0.5, 0.5) (no candle RNG: the same on every
/// machine).
pub(crate) fn seeded(shape: (usize, usize), seed: u64) -> Tensor {
    let mut state = seed;
    let values: Vec<f32> = (0..shape.0 * shape.1)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect();
    Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
}

/// The op gives the product, `x`'s gradient and (in its sink) `W`'s gradient of candle's
/// own `x.matmul(Wᵀ)`, bit for bit, on shapes that leave partial gemm tiles; a second
/// backward pass adds to the sink, and `take` empties it.
#[test]
fn trained_linear_matches_candles_matmul_and_its_gradients() {
    for (rows, inputs, out) in [(7, 5, 3), (37, 64, 96), (130, 576, 192)] {
        let x = Var::from_tensor(&seeded((rows, inputs), 1)).unwrap();
        let w = Var::from_tensor(&seeded((out, inputs), 2)).unwrap();
        let dy = seeded((rows, out), 3);
        let sink = GradSink::default();
        let ours = trained_linear(x.as_tensor(), &w, &sink, Precision::F32).unwrap();
        let theirs = x.as_tensor().matmul(&w.as_tensor().t().unwrap()).unwrap();
        assert_eq!(
            max_abs_diff(&ours, &theirs),
            0.0,
            "product {rows}x{inputs}x{out}"
        );
        // A loss whose gradient with respect to the output is `dy`.
        let grads = (ours * &dy).unwrap().sum_all().unwrap().backward().unwrap();
        let reference = (theirs * &dy)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert!(
            grads.get(w.as_tensor()).is_none(),
            "W's gradient bypasses candle"
        );
        let dx = grads.get(x.as_tensor()).unwrap();
        assert_eq!(max_abs_diff(dx, reference.get(x.as_tensor()).unwrap()), 0.0);
        let dw = sink.take(w.shape()).unwrap().unwrap();
        let expected = reference.get(w.as_tensor()).unwrap();
        assert_eq!(max_abs_diff(&dw, expected), 0.0, "dW {rows}x{inputs}x{out}");
        assert!(
            sink.take(w.shape()).unwrap().is_none(),
            "take empties the sink"
        );

        // Twice through the op before one take: the sum of both passes.
        for _ in 0..2 {
            let y = trained_linear(x.as_tensor(), &w, &sink, Precision::F32).unwrap();
            (y * &dy).unwrap().sum_all().unwrap().backward().unwrap();
        }
        let twice = sink.take(w.shape()).unwrap().unwrap();
        let doubled = (expected * 2.0).unwrap();
        assert!(max_abs_diff(&twice, &doubled) <= 1e-5 * (1.0 + inputs as f32));
    }
    let sink = GradSink::default();
    let x = seeded((2, 3), 4);
    let w = Var::zeros((4, 3), DType::F32, &Device::Cpu).unwrap();
    trained_linear(&x, &w, &sink, Precision::F32).unwrap();
    sink.clear();
    assert!(sink.take(w.shape()).unwrap().is_none());
}

/// `t` with every value rounded to bf16 (what the bf16 products multiply).
fn rounded(t: &Tensor) -> Tensor {
    use tabcontam_kernels::bf16::{from_bf16, to_bf16};
    let values: Vec<f32> = t
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .into_iter()
        .map(|v| from_bf16(to_bf16(v)))
        .collect();
    Tensor::from_vec(values, t.shape(), t.device()).unwrap()
}

/// In bf16 the op's three products (`x Wᵀ`, `dy W` and, in the sink, `dyᵀ x`, the one
/// computed transposed) are candle's f32 products of the bf16-rounded operands, to
/// f32 summation error; and they differ from the f32 op's by bf16 rounding, no more.
#[test]
fn bf16_products_are_the_rounded_operands_products() {
    for (rows, inputs, out) in [(7, 5, 3), (37, 64, 96), (130, 576, 192)] {
        let x = Var::from_tensor(&seeded((rows, inputs), 1)).unwrap();
        let w = Var::from_tensor(&seeded((out, inputs), 2)).unwrap();
        let dy = seeded((rows, out), 3);
        let sink = GradSink::default();
        let ours = trained_linear(x.as_tensor(), &w, &sink, Precision::Bf16).unwrap();
        let (xr, wr, dyr) = (rounded(x.as_tensor()), rounded(w.as_tensor()), rounded(&dy));
        let product = xr.matmul(&wr.t().unwrap()).unwrap();
        let tolerance = 2e-6 * inputs.max(rows).max(out) as f32;
        assert!(
            max_abs_diff(&ours, &product) <= tolerance,
            "x Wᵀ {rows}x{inputs}x{out}"
        );
        let grads = (ours * &dy).unwrap().sum_all().unwrap().backward().unwrap();
        let dx = grads.get(x.as_tensor()).unwrap();
        assert!(
            max_abs_diff(dx, &dyr.matmul(&wr).unwrap()) <= tolerance,
            "dy W"
        );
        let dw = sink.take(w.shape()).unwrap().unwrap();
        let expected = dyr.t().unwrap().matmul(&xr).unwrap();
        assert!(
            max_abs_diff(&dw, &expected) <= tolerance,
            "dyᵀ x {rows}x{inputs}x{out}"
        );
        let f32_product = x.as_tensor().matmul(&w.as_tensor().t().unwrap()).unwrap();
        let gap = max_abs_diff(&product, &f32_product);
        assert!(
            gap > 0.0 && gap < 0.02 * (inputs as f32).sqrt(),
            "bf16 rounding moves the product a little: {gap}"
        );
    }
}

/// A product split over threads (`products::split_gemm`) writes the values of one single-threaded
/// gemm, bit for bit: row-major and column-major destinations (the split runs along `n`
/// and along `m`), slices that end mid-tile, a scaled product added to what the
/// destination holds, and a destination too short to split (gemm's own threads).
#[test]
fn split_products_are_one_gemms_values() {
    for (m, n, k, dst_row_major) in [
        (130, 300, 576, true),
        (300, 130, 200, false),
        (64, 129, 33, true),
        (129, 64, 33, false),
        (40, 100, 17, true),
        // SmolLM2's q/o (576 outputs) projections, split on 16 rows, and its down
        // projection (`k` = 1536, which gemm adds in several blocks).
        (70, 576, 96, true),
        (128, 576, 1536, true),
        (576, 70, 50, false),
    ] {
        let lhs = seeded((m, k), 11)
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let rhs = seeded((k, n), 12)
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let held = seeded((m, n), 13)
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let dst_strides = if dst_row_major {
            (n as isize, 1)
        } else {
            (1, m as isize)
        };
        let product = Product {
            m,
            n,
            k,
            dst: dst_strides,
            lhs: (lhs.as_ptr(), k as isize, 1),
            rhs: (rhs.as_ptr(), n as isize, 1),
        };
        for (read, scale) in [(false, 1.0), (true, 0.37)] {
            let mut one = held.clone();
            // SAFETY: `one` holds `m · n` initialised values at the destination's strides,
            // and the operands are the vectors their strides walk.
            unsafe { scaled_gemm(product, one.as_mut_ptr(), read, scale, 1, Precision::F32) };
            for threads in [2, 3] {
                let mut split = held.clone();
                // SAFETY: as above.
                unsafe {
                    scaled_gemm(
                        product,
                        split.as_mut_ptr(),
                        read,
                        scale,
                        threads,
                        Precision::F32,
                    )
                };
                let same = one
                    .iter()
                    .zip(&split)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{m}x{n}x{k} row-major {dst_row_major} read {read} on {threads} threads"
                );
            }
        }
    }
}
