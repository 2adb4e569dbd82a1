-- local placeholder (untracked): the real 0005 comes with another branch
SELECT 1;
