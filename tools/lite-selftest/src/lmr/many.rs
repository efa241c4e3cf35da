//! `lmr-many`: allocate many LMRs from several threads and leave them to the kernel.

use super::why;
use lite::{Lite, MallocOptions};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `lmr-many`: what to allocate, from how many threads, and how long to hold it.
pub struct Many {
    pub count: u32,
    pub size: u64,
    pub holders: Vec<u32>,
    pub threads: u32,
    pub hold: Option<Duration>,
}

/// `lmr-many`.
pub fn many(lite: &Lite, args: Many) -> ExitCode {
    let Many { count, size, holders, threads, hold } = args;
    if count == 0 || size == 0 || threads == 0 {
        eprintln!("lite-selftest: COUNT, --size and --threads must be at least 1");
        return ExitCode::from(2);
    }
    let pid = std::process::id();
    // Each thread allocates through an open of /dev/lite of its own (an open holds
    // at most 65 536 LMRs): this one and threads - 1 more.
    let more = match (1..threads.min(count)).map(|_| Lite::open()).collect::<Result<Vec<_>, _>>() {
        Ok(more) => more,
        Err(e) => {
            eprintln!("lmr-many: open /dev/lite once per thread: {}", why(&e));
            return ExitCode::FAILURE;
        }
    };
    let start = Instant::now();
    let options = MallocOptions { holders, ..MallocOptions::default() };
    // Each thread takes the next index until COUNT are made or one fails.
    let next = std::sync::atomic::AtomicU32::new(0);
    let made = std::sync::Mutex::new(Vec::with_capacity(count as usize));
    let failed = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for lite in std::iter::once(lite).chain(&more) {
            let (next, made, failed, options) = (&next, &made, &failed, &options);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= count || failed.lock().unwrap().is_some() {
                    return;
                }
                match lite.malloc(size, &format!("many-{pid}-{i}"), options) {
                    Ok(lmr) => made.lock().unwrap().push(lmr),
                    Err(e) => {
                        failed.lock().unwrap().get_or_insert(format!("malloc #{i} of {size} bytes: {}", why(&e)));
                    }
                }
            });
        }
    });
    let lmrs = made.into_inner().unwrap();
    if let Some(e) = failed.into_inner().unwrap() {
        eprintln!("lmr-many: {e}");
        std::mem::forget(lmrs);
        return ExitCode::FAILURE;
    }
    let elapsed = start.elapsed();
    let len = size.min(8) as usize;
    let word = 0x0123_4567_89ab_cdef_u64.to_le_bytes();
    let ends = [(&lmrs[0], 0), (&lmrs[lmrs.len() - 1], size - len as u64)];
    for (lmr, offset) in ends {
        let mut back = [0u8; 8];
        let result = lmr.write(offset, &word[..len]).and_then(|()| lmr.read(offset, &mut back[..len]));
        match result {
            Ok(()) if back[..len] == word[..len] => {}
            Ok(()) => {
                eprintln!("lmr-many: read back {:02x?} at {offset}, wrote {:02x?}", &back[..len], &word[..len]);
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("lmr-many: {len} bytes at {offset}: {}", why(&e));
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "many: {count} LMRs of {size} bytes: malloc {:.3} s ({:.1} us each); first and last written",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / f64::from(count)
    );
    if let Some(hold) = hold {
        // A line of its own, once they all exist: scripts wait for it.
        println!("holding {count} LMRs for {} s", hold.as_secs_f64());
        std::thread::sleep(hold);
    }
    // Exit without freeing or unmapping: the kernel's cleanup at exit is what is exercised.
    std::mem::forget(lmrs);
    ExitCode::SUCCESS
}
