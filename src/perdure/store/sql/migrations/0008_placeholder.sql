-- local placeholder (untracked): the real 0008 comes with another branch
SELECT 1;
