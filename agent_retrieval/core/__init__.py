"""The core every part builds on: words and quoting, argument rules, steps written once for sync and async,
what the process keeps, keys kept out of output, progress bars, prompts and score fusion."""
