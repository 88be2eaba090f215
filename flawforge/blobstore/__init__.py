"""Blob storage: one interface, a local-folder backend and an S3/MinIO backend."""
from flawforge.blobstore.base import BlobStore, content_key
from flawforge.blobstore.local import LocalBlobStore

__all__ = ["BlobStore", "LocalBlobStore", "content_key", "open_blob_store"]


def open_blob_store(settings) -> BlobStore:
    """Builds the backend named by the settings."""
    if settings.blob_backend == "local":
        return LocalBlobStore(settings.blob_dir, min_free_bytes=settings.blob_min_free_mb << 20)
    from flawforge.blobstore.s3 import S3BlobStore

    return S3BlobStore(
        endpoint=settings.s3_endpoint,
        access_key=settings.s3_access_key,
        secret_key=settings.s3_secret_key,
        bucket=settings.s3_bucket,
        secure=settings.s3_secure,
        region=settings.s3_region,
    )
