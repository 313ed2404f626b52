"""Read-only access to a store directory: what the store tool's inspect/dump/verify and the
audit read. Nothing here takes the `lock`, recovers, or writes a byte, so it works on a running
store and on copies. Files are mapped with mmap ACCESS_READ, and every size is learnt from the
files themselves (commitlog file size = size of the first file, consume queue file size from
each queue's files, index geometry from the index file size and header): no configuration is
needed. Records are checked and decoded by store.codec only.

    files.py          ROFile (one mapped file), numbered_files (a directory's store files)
    queue_files.py    QueueFiles (the files of one consume queue)
    index_reader.py   IndexReader, IndexHeader, infer_index_geometry
    store_reader.py   StoreReader (the whole directory), ScanResult, NotAStoreDirectory
"""
from .files import ROFile, numbered_files
from .index_reader import IndexHeader, IndexReader, infer_index_geometry
from .queue_files import QueueFiles
from .store_reader import NotAStoreDirectory, ScanResult, StoreReader

__all__ = ["IndexHeader", "IndexReader", "NotAStoreDirectory", "QueueFiles", "ROFile",
           "ScanResult", "StoreReader", "infer_index_geometry", "numbered_files"]
