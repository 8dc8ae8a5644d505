# share/: pipelines, sample data generator output, docs
