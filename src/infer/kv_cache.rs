//! The KV cache of one attention layer for a batch: preallocated, written in place at each
//! step, grown when answers outrun it, and copied per prompt or per row (shared prefixes,
//! finished rows dropped).

use std::ops::Range;

use candle_core::{DType, Device, Tensor};

use super::error::CResult;

/// Keys and values of one attention layer for a batch, preallocated to the longest
/// sequence the batch can reach so that each step writes in place.
#[derive(Debug, Clone)]
pub struct LayerCache {
    k: Tensor,
    v: Tensor,
}

impl LayerCache {
    pub fn new(k: Tensor, v: Tensor) -> Self {
        LayerCache { k, v }
    }

    pub fn empty(
        batch: usize,
        kv_heads: usize,
        capacity: usize,
        head_dim: usize,
        dtype: DType,
        device: &Device,
    ) -> CResult<Self> {
        let shape = (batch, kv_heads, capacity, head_dim);
        Ok(LayerCache {
            k: Tensor::zeros(shape, dtype, device)?,
            v: Tensor::zeros(shape, dtype, device)?,
        })
    }

    pub fn capacity(&self) -> usize {
        self.k.dim(2).unwrap_or(0)
    }

    /// The keys and values, `(batch, kv_heads, capacity, head_dim)` each.
    pub fn tensors(&self) -> (&Tensor, &Tensor) {
        (&self.k, &self.v)
    }

    /// Writes `k`, `v` at `offset` and returns the views over `[0, offset + new)`. The
    /// cache grows (by a quarter) when the sequences outrun it: generations are sized
    /// for what they produce, not for their token budget.
    pub fn append(&mut self, offset: usize, k: &Tensor, v: &Tensor) -> CResult<(Tensor, Tensor)> {
        let new = k.dim(2)?;
        let needed = offset + new;
        let capacity = self.capacity();
        if needed > capacity {
            self.grow(needed + needed / 4 + 16 - capacity)?;
        }
        self.k.slice_set(&k.contiguous()?, 2, offset)?;
        self.v.slice_set(&v.contiguous()?, 2, offset)?;
        Ok((
            self.k.narrow(2, 0, offset + new)?,
            self.v.narrow(2, 0, offset + new)?,
        ))
    }

    fn grow(&mut self, extra: usize) -> CResult<()> {
        let widen = |t: &Tensor| -> CResult<Tensor> {
            let (b, heads, _, head_dim) = t.dims4()?;
            let room = Tensor::zeros((b, heads, extra, head_dim), t.dtype(), t.device())?;
            Tensor::cat(&[t, &room], 2)
        };
        self.k = widen(&self.k)?;
        self.v = widen(&self.v)?;
        Ok(())
    }

    /// The first `len` positions copied into a new cache of `batch` sequences and
    /// `capacity` positions (the shared-prefix snapshot handed to each prompt).
    pub fn expand(&self, len: usize, batch: usize, capacity: usize) -> CResult<Self> {
        if self.k.device().is_cpu() && self.k.dtype() == DType::F32 {
            return Ok(LayerCache {
                k: expand_cpu(&self.k, len, batch, capacity)?,
                v: expand_cpu(&self.v, len, batch, capacity)?,
            });
        }
        let grow = |t: &Tensor| -> CResult<Tensor> {
            let (b, heads, _, head_dim) = t.dims4()?;
            let prefix = t.narrow(2, 0, len)?;
            let prefix = if b == batch {
                prefix
            } else {
                prefix.broadcast_as((batch, heads, len, head_dim))?
            };
            let rest = Tensor::zeros(
                (batch, heads, capacity - len, head_dim),
                t.dtype(),
                t.device(),
            )?;
            Tensor::cat(&[&prefix.contiguous()?, &rest], 2)
        };
        Ok(LayerCache {
            k: grow(&self.k)?,
            v: grow(&self.v)?,
        })
    }

    /// Writes `k`, `v` `(1, kv_heads, new, head_dim)` into sequence `row` from `slot` on.
    pub fn write_row(&mut self, row: usize, slot: usize, k: &Tensor, v: &Tensor) -> CResult<()> {
        self.k
            .narrow(0, row, 1)?
            .slice_set(&k.contiguous()?, 2, slot)?;
        self.v
            .narrow(0, row, 1)?
            .slice_set(&v.contiguous()?, 2, slot)
    }

    /// Sequence `row`'s keys and values over `slots`, `(1, kv_heads, len, head_dim)` views.
    pub fn row_view(&self, row: usize, slots: Range<usize>) -> CResult<(Tensor, Tensor)> {
        let view = |t: &Tensor| t.narrow(0, row, 1)?.narrow(2, slots.start, slots.len());
        Ok((view(&self.k)?, view(&self.v)?))
    }

    /// Sequence `row`'s `slots` as a cache of one sequence holding just them.
    pub fn row_copy(&self, row: usize, slots: Range<usize>) -> CResult<Self> {
        let (k, v) = self.row_view(row, slots)?;
        Ok(LayerCache {
            k: k.force_contiguous()?,
            v: v.force_contiguous()?,
        })
    }

    /// Copies `len` slots of `source`'s sequence `from.0` (this cache's when `source` is
    /// `None`) starting at slot `from.1` into sequence `to.0` from slot `to.1`.
    pub fn copy_slots(
        &mut self,
        source: Option<&LayerCache>,
        from: (usize, usize),
        to: (usize, usize),
        len: usize,
    ) -> CResult<()> {
        let (k, v) = source
            .unwrap_or(self)
            .row_view(from.0, from.1..from.1 + len)?;
        // A dense copy first: the source may share this cache's storage.
        self.write_row(to.0, to.1, &k.force_contiguous()?, &v.force_contiguous()?)
    }

    /// Keeps only the sequences at `rows` (finished ones leave the batch).
    pub fn select(&self, rows: &Tensor) -> CResult<Self> {
        Ok(LayerCache {
            k: self.k.index_select(rows, 0)?,
            v: self.v.index_select(rows, 0)?,
        })
    }
}

/// [`LayerCache::expand`] on CPU: the new cache written once, in place, instead of a
/// broadcast copy, a zero block and their concatenation (three times the cache at peak).
fn expand_cpu(t: &Tensor, len: usize, batch: usize, capacity: usize) -> CResult<Tensor> {
    let (b, heads, _, head_dim) = t.dims4()?;
    if b != 1 && b != batch {
        candle_core::bail!("cannot expand a cache of {b} sequences to {batch}");
    }
    // `(b, heads, len, head_dim)` rows of the source, dense.
    let prefix = t
        .narrow(2, 0, len)?
        .contiguous()?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let per_head = len * head_dim;
    let mut out = vec![0f32; batch * heads * capacity * head_dim];
    for (sequence, block) in out
        .chunks_exact_mut(heads * capacity * head_dim)
        .enumerate()
    {
        // One source sequence broadcast to every row, or row for row.
        let source = if b == 1 { 0 } else { sequence };
        for (head, rows) in block.chunks_exact_mut(capacity * head_dim).enumerate() {
            let from = (source * heads + head) * per_head;
            rows[..per_head].copy_from_slice(&prefix[from..from + per_head]);
        }
    }
    Tensor::from_vec(out, (batch, heads, capacity, head_dim), t.device())
}
