//! The simulator end to end: determinism, each seed scenario's qualitative finding, the
//! compare matrix, and record → replay giving the same decisions as the run recorded.

use innopilot::sim::compare::{compare_with, CompareOptions};
use innopilot::sim::{run, summary, Peer, Scenario};

#[test]
#[ignore]
fn print_matrix() {
    let t = std::time::Instant::now();
    let scale: f64 = std::env::var("SIM_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let only: Option<String> = std::env::var("SIM_ONLY").ok();
    let mut opts = CompareOptions::all(1);
    opts.scenarios = Scenario::all()
        .into_iter()
        .filter(|s| {
            only.as_ref()
                .is_none_or(|o| o.split(',').any(|x| x == s.name))
        })
        .map(|s| if s.name == "day" { s.scaled(scale) } else { s })
        .collect();
    let table = compare_with(&opts).unwrap();
    println!("{table}");
    println!("elapsed {:?}", t.elapsed());
    let _ = (run, summary, Peer::all);
}
