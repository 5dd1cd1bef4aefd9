//! Short runs of every fuzz target (`agent_tests::fuzz`), through the same
//! code as the long ones `tests/fuzz.sh` runs: a few seconds each, with a
//! seed from the clock (printed, so a failure can be repeated with
//! `tests/fuzz.sh TARGET SECONDS` and `FUZZ_SEED=…`).

use agent_tests::fuzz::{self, FuzzOptions, Target};
use std::time::Duration;

async fn short_run(target: Target, seconds: u64) {
    let seed = fuzz::seed_from_clock();
    println!("fuzz {} seed {seed}", target.name());
    let opts = FuzzOptions {
        budget: Duration::from_secs(seconds),
        seed,
        ..FuzzOptions::default()
    };
    let report = fuzz::run(target, opts).await;
    println!("{report}");
    assert!(report.passed(), "{report}");
    assert!(report.cases > 0, "no case ran: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_sse_briefly() {
    short_run(Target::Sse, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_rules_briefly() {
    short_run(Target::Rules, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_grpc_frames_briefly() {
    short_run(Target::GrpcFrames, 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_rpc_sequences_briefly() {
    short_run(Target::RpcSequences, 10).await;
}
