"""What Celery workers of Tributary load before they fork their task processes."""
