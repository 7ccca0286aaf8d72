set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/stories260K-+qk/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'stories260K'
plot 4.1208321378379855 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 5.658031727562084
20 11.400417290256767
30 28.507661937665127
40 68.43885542608477
e
