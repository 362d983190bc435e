//! The CPU share a perfectly balanced fork-join reaches on this machine: two equal tasks
//! of pure arithmetic (no memory traffic), joined from a thread outside the pool as the
//! trainer's main thread joins them, repeated for 2 s per task length. Prints the wall time
//! against the ideal, the cost per join and the process's CPU share: the ceiling that
//! training's per-op parallelism (about a thousand joins a step) can reach, since every op
//! splits its work in halves that must both finish.
//!
//! `cargo bench -p tabcontam-kernels --bench forkjoin` (`RAYON_NUM_THREADS` = cores).

use std::time::Instant;

/// A dependent chain of integer multiply-adds: `iterations` of them, nothing to vectorize.
fn arithmetic(iterations: u64) -> u64 {
    let mut x = 1u64;
    for i in 0..iterations {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
    }
    x
}

/// The process's user and system CPU seconds so far (`/proc/self/stat`, Linux only).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start past its `)`.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // The kernel's clock tick is 100 Hz on every Linux this runs on (USER_HZ).
    Some(ticks / 100.0)
}

fn main() {
    let threads = rayon::current_num_threads();
    let started = Instant::now();
    std::hint::black_box(arithmetic(20_000_000));
    let per_microsecond = 20_000_000.0 / (started.elapsed().as_secs_f64() * 1e6);
    println!("{threads} pool threads; two equal tasks per join, joined from outside the pool");
    println!("task µs   joins   wall s  ideal s  µs lost/join  CPU %");
    for task_micros in [50.0, 200.0, 1_000.0, 5_000.0] {
        let iterations = (per_microsecond * task_micros) as u64;
        let joins = (2_000_000.0 / task_micros) as usize;
        let cpu_before = process_cpu_seconds();
        let started = Instant::now();
        for _ in 0..joins {
            rayon::join(
                || std::hint::black_box(arithmetic(iterations)),
                || std::hint::black_box(arithmetic(iterations)),
            );
        }
        let wall = started.elapsed().as_secs_f64();
        let ideal = joins as f64 * task_micros * 1e-6;
        let cpu = match (cpu_before, process_cpu_seconds()) {
            (Some(before), Some(after)) => format!("{:.0}", 100.0 * (after - before) / wall),
            _ => "n/a".to_string(),
        };
        println!(
            "{task_micros:>7.0} {joins:>7} {wall:>8.3} {ideal:>8.3} {:>13.1} {cpu:>6}",
            (wall - ideal) / joins as f64 * 1e6
        );
    }
}
