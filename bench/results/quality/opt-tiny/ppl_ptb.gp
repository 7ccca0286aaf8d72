set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/quality/opt-tiny/ppl_ptb.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (ptb)'
set title 'opt-tiny'
plot 796.6734251700406 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-cov', '-' using 1:2 with linespoints title 'asvd-hessian', '-' using 1:2 with linespoints title 'asvd-l1', '-' using 1:2 with linespoints title 'asvd-l2', '-' using 1:2 with linespoints title 'asvd-rootcov', '-' using 1:2 with linespoints title 'latentllm', '-' using 1:2 with linespoints title 'plain-svd'
10 796.8923560047615
20 795.2446626058016
30 795.5781708805825
40 795.0070716941282
e
10 796.7704119668056
20 797.5233600447574
30 798.2139729395692
40 801.6144203316775
e
10 795.7998559267033
20 796.6018162778362
30 796.893273223066
40 799.6066716254337
e
10 795.9138973692784
20 796.4710339443712
30 797.1448197696388
40 801.3047547220369
e
10 796.521881981865
20 795.637991590447
30 795.5011401588619
40 795.3933596043912
e
10 796.4120717341963
20 795.7800897777057
30 795.6109010484955
40 795.9809666724652
e
10 796.1665945904242
20 796.8702408475565
30 796.0066716096567
40 800.412312028218
e
