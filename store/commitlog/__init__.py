"""The commitlog: mapped files (mapped_file, mapped_file_queue), the only module touching mmap and
fsync (fileio), page prefaulting (prefault), the log itself (commitlog) and the one walk over its
records (commitlog_walk).
"""
