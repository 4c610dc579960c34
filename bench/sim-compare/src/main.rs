//! The simulator (`innopilot::sim`) on the built-in scenarios closest to the real
//! benchmark's, every peer, seed 1; JSON on standard output.
use innopilot::sim::compare::{compare_with, CompareOptions};
use innopilot::sim::peers::Peer;
use innopilot::sim::scenario::Scenario;

fn main() {
    let names = ["long_read_view", "redo_pressure", "flush_bound"];
    let opts = CompareOptions {
        seed: 1,
        scenarios: names.iter().filter_map(|n| Scenario::named(n)).collect(),
        peers: Peer::all(),
        threads: 0,
    };
    match compare_with(&opts) {
        Ok(t) => println!("{}", t.to_json()),
        Err(e) => {
            eprintln!("simulation failed: {e}");
            std::process::exit(1);
        }
    }
}
